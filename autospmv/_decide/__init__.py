"""Deciding: the features of a matrix, the kernels' cost quantities and parameter
choosers, the trained models and the selection of a kernel."""
