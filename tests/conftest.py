"""Shared fixtures. Feature-specific fixtures live beside their tests."""
