"""An HTTP gateway in front of tritonserver: PaddleNLP SimpleServing's JSON and Hugging Face's (the Inference API
that huggingface_hub's InferenceClient calls, and text-embeddings-inference's /predict, /tokenize, /embed,
/similarity and /rerank) for every served model, and OpenAI's embeddings for the embed models, over one asyncio gRPC
connection to Triton (`ernie-deploy gateway`; docs/GATEWAY.md).

Imports: ernie_deploy.core, client (the gRPC client and reading a model's wire), repository (the served models'
records, read from the repository folder), server (free ports and process groups, for the process wrapper), the
kinds' `gateway` modules; Starlette, uvicorn, tritonclient and prometheus_client. Never paddle: the gateway runs
beside Triton on a machine that may hold nothing else of the pipeline. Nothing imports the gateway but the CLI.

Modules: app (the routes, create_app), listen (serve: uvicorn, HTTPS), bodies (reading requests, the texts cap),
errors (each contract's error shape), models (what is served), triton (the gRPC side), coalesce (concurrent
requests of a model merged into one Triton call), retrieval (TEI's embed, similarity and rerank bodies and answers),
openai (OpenAI's embeddings body and answer), retrieval_routes (those routes over Triton), tokenize (TEI's
/tokenize), metrics, parameters (checks the kinds share), process (GatewayProcess).
"""

from __future__ import annotations

from ernie_deploy.gateway.process import GatewayProcess

__all__ = ["Gateway", "GatewayProcess", "GatewaySettings", "create_app", "serve"]


def __getattr__(name: str):
    # Lazily, so that a kind's gateway module can import gateway.parameters without loading the app.
    if name in ("Gateway", "GatewaySettings", "create_app"):
        from ernie_deploy.gateway import app

        return getattr(app, name)
    if name == "serve":
        from ernie_deploy.gateway import listen

        return listen.serve
    if name == "GatewayProcess":
        return GatewayProcess
    raise AttributeError(name)
