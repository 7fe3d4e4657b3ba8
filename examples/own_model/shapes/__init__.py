"""A package of one's own for lbtrain: a functional convnet with batch norm (``shapes.models``)
and a small image dataset saved as ``.npz`` (``shapes.data``)."""
