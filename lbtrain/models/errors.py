"""``ModelError``: a model that cannot be named, built or trained on its data."""


class ModelError(ValueError):
    """An unknown model name, a bad model option, or a model that does not fit its data."""


# Tracebacks and pickles name the public path, as they did before lbtrain.models became a package.
ModelError.__module__ = "lbtrain.models"
