"""Pure protocol types and rules of the router's two wires.

``wire`` imports only the standard library, attrs and cattrs: no I/O, no Trio.
``router`` imports ``wire``, never the reverse (``tests/test_layering.py``).
"""
