"""ray-doctor: a command-line doctor for failed Ray Tune and Ray Train experiments."""

__version__ = "0.1.0"
