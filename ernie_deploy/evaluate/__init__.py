"""Scores (scikit-learn, seqeval) and the offline Paddle and ONNX predictions they are compared with.

Imports: ernie_deploy.core, serving, fetch and export.
"""
