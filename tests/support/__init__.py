"""Test helpers shared by the suites: the real Aeron Java peer and bounded waiting."""
