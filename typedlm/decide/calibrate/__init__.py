"""Calibration with labels: the typed bundle applied at run time (``bundle``), fitting its parameters
(``fit``), and the labelled scores it is fitted on (``collect``)."""
