"""The router: everything that runs (Trio code). Protocol types live in ``wire``."""
