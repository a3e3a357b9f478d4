"""What is measured: the variant registry, the built-in losses, users' losses, inputs and steps."""
