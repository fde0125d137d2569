"""Pure parsers for the text that diagnostic commands print: nvidia-smi, ps, fuser, cgroups, sockets.

Each takes captured output and returns frozen values, or raises ParseError saying what was expected.
"""
