"""A posterior that a plugin package would provide (registered on import; tests/test_checks.py)."""
import uncertain_agents as ua
from uncertain_agents.posteriors.point_estimates import PointEstimates


@ua.register_posterior("test-plugin-posterior")
class PluginPosterior(PointEstimates):
    name = "test-plugin-posterior"
    default_members = 2
