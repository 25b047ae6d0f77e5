"""Fake peers for tests and benchmarks: servers on loopback that behave like
the real services an agent CLI talks to, scripted per test."""
