"""The gateway's defaults, and why (standard library only: the CLI reads them to build its parser)."""

# The largest body a default-limits model can be sent: its request limit for the cut text, 400,000 characters
# (serving.limits.CUT), written as JSON clients write it by default (Python's json and requests, huggingface_hub:
# ASCII with \uXXXX escapes, 6 bytes a CJK character; 3 as raw UTF-8). Measured: 400,000 CJK characters as one text
# are 2,400,077 bytes of SimpleServing JSON; as 400,000 one-character texts, 4,000,078 (the worst case: quotes and
# ", " per text). 4 MiB holds both, so no request the models take is refused for its size.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# Inference requests answered at once, beyond which a request gets 503 + Retry-After. Measured through one gateway to
# a tiny classifier on a shared 2-core host (gateway, tritonserver and load generator together; docs/GATEWAY.md):
# 574 req/s at 8 concurrent, 751 at 64, 891 at 128, 933 at 256 (Triton's dynamic batching merges more as more wait),
# while the p99 latency grows nearly as fast as the concurrency (104 ms at 32, 147 at 64, 287 at 128, 506 at 256):
# past 64 a request mostly waits in a queue. 64 also bounds the bodies held in memory to 64 x 4 MiB = 256 MiB.
DEFAULT_MAX_CONCURRENT = 64
DEFAULT_PORT = 8080
# Texts one inference request may hold, beyond which it is refused by name (413; 400 on the OpenAI route): TEI's
# `max_client_batch_size` and its default. It bounds what one request costs the server (Triton runs a request's
# texts in max_batch_size parts at once) and the gateway (each text's answer is held until the request's last one
# comes back), as --max-concurrent-requests bounds how many run: at both defaults 64 x 32 = 2,048 texts in flight.
# A batch client splits its list; a deployment that wants larger requests raises it.
DEFAULT_MAX_CLIENT_BATCH_SIZE = 32
# The window in which concurrent requests of one model are merged into one Triton call (--coalesce-ms;
# gateway.coalesce), taken only while another call to the model is in flight: a lone request never waits it.
# Measured on the demo classifier at concurrency 8, one text a request, on a shared 2-core host (docs/gateway.json):
# 1.08x direct gRPC's throughput merging within 1 ms against 0.94x merging none (1.15x and 0.93x on the Hugging Face
# route), the gateway's CPU a request 0.37 ms. A 2 ms window, in a shorter run (one round of 4 s cells,
# --coalesce-ms 2), gave 1.25x and 1.02x (SimpleServing, Hugging Face) over merging none, within the spread between
# rounds, so the shorter wait is the default. uvloop's timers count whole milliseconds: a window under 1 ms fires on
# the loop's next turn.
DEFAULT_COALESCE_MS = 1.0
# The longest window taken: a request waits at most this long for others to merge with.
MAX_COALESCE_MS = 100.0
