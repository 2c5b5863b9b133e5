"""The peer a Paddle user would pick: PaddleNLP's SimpleServing on the same static model, its server process and
the calls to it. The benchmark loads it beside the served rows (benchmarks/peer_rows.py).

Imports: ernie_deploy.core, server (process groups, free ports) and client (how a request's texts are laid out).
"""
