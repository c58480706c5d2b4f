"""How methods and metrics run the model: task data, hook points, hook plans, edge groups and ablations."""
