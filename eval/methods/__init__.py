"""Circuit-discovery methods: the interface (interface.py), options (options.py), one module per method or method family, and the registry (registry.py) that lists them."""
