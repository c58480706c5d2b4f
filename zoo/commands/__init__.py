"""The CLI's verbs, one module per family. Each module's top level imports only the standard
library and defines `register(subparsers)`; heavy imports happen inside the verb functions."""

from zoo.commands import bench, catalogue, evaluate, generate, hub, realism, training, validating

VERB_MODULES = (catalogue, generate, training, validating, evaluate, bench, realism, hub)
