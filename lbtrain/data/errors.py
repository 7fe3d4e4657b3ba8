"""``DatasetError``, the one exception of ``lbtrain.data``.

It lives in its own module because the IDX reader, the dataset registry and the input
pipeline all raise it, and the registry imports the reader.
"""


class DatasetError(ValueError):
    """A dataset cannot be loaded: unknown name, bad option, missing or corrupt file."""


# Tracebacks and pickles name the public path, as they did before lbtrain.data became a package.
DatasetError.__module__ = "lbtrain.data"
