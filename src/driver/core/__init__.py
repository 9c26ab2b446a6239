"""The media driver: conductor, publications and the agents' composition."""
