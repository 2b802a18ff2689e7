"""esbench's harness. Importing it registers the config resolvers (${esbench.generation_budget:...})."""
from harness.core.model_shapes import register_resolvers

register_resolvers()
