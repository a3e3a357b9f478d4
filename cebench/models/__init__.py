"""Models whose training step a loss runs in: presets, Hugging Face config files, a user's build.

`resolve_model(text)` names one (`cebench models` lists the presets); `Model.build(device,
dtype)` gives its body and head weight (`Built`). `cebench.models.training` runs a loss inside
the model's training step; `cebench.models.attention` names the attention kernel a device runs.
"""
from __future__ import annotations

from cebench.models.contract import BuildFn, Built
from cebench.models.model import PRESETS, Model, Preset, presets, resolve_model
from cebench.models.spec import MODEL_TYPES, ModelSpec

__all__ = ["MODEL_TYPES", "PRESETS", "BuildFn", "Built", "Model", "ModelSpec", "Preset", "presets", "resolve_model"]
