"""A plugin whose import fails."""
raise ImportError("libascendcl.so: cannot open shared object file")
