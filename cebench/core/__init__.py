"""The measured point and what it is made of: configs, axes, the grid, devices, units, errors."""
