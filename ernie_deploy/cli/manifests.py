"""`ernie-deploy manifests`: Kubernetes Deployment, Service and autoscaler for serving a repository, or (--kserve) the
same pod as a KServe InferenceService."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_renamed, add_repository
from ernie_deploy.deployfiles.manifests import write
from ernie_deploy.deployfiles.options import ManifestOptions
from ernie_deploy.deployfiles.pod import secret_command, secret_name, tls_secret_command, tls_secret_name


def register(sub) -> None:
    p = sub.add_parser(
        "manifests",
        help="Kubernetes manifests (Deployment, Service, autoscaler; or a KServe InferenceService) for serving a "
        "repository from the image, /dev/shm sized from the repository",
    )
    defaults = ManifestOptions()
    add_repository(p, "the repository the image serves, to size /dev/shm from", positional=True)
    p.add_argument(
        "--out",
        default=None,
        help="folder for deployment.yaml, service.yaml, hpa.yaml (default: deploy/k8s), or with --kserve for "
        "inferenceservice.yaml (default: deploy/kserve)",
    )
    p.add_argument(
        "--kserve",
        action="store_true",
        help="write a KServe InferenceService (inferenceservice.yaml) instead of the three files: the same pod, "
        "image, command line, Secrets, probes and /dev/shm as a custom predictor in KServe's Standard mode "
        "(KServe 0.16 or later), which makes the Deployment, Service, CPU autoscaler and ingress from it. "
        "Apply one or the other, not both",
    )
    p.add_argument("--image", default=defaults.image, help="the image built from docker/Dockerfile, with its registry")
    add_renamed(
        p,
        "--name",
        "--app-name",
        default=defaults.name,
        metavar="NAME",
        help="name of the Deployment, Service and autoscaler, or of the InferenceService, and the prefix of their "
        "Secrets' names (default %(default)s)",
    )
    p.add_argument("--min-replicas", type=int, default=defaults.min_replicas)
    p.add_argument("--max-replicas", type=int, default=defaults.max_replicas)
    p.add_argument(
        "--cpu-target",
        type=int,
        default=defaults.cpu_target,
        help="autoscaler target: average CPU use across pods, in percent of --cpu",
    )
    p.add_argument("--cpu", default=defaults.cpu, help="CPU request per pod (with --kserve also its limit)")
    p.add_argument("--memory", default=defaults.memory, help="memory request per pod")
    p.add_argument(
        "--memory-limit",
        default=defaults.memory_limit,
        help="memory limit per pod; /dev/shm (memory-backed) counts against it",
    )
    p.add_argument("--gpus", type=int, default=defaults.gpus, help="nvidia.com/gpu per pod (default: none)")
    p.add_argument(
        "--shm-default-byte-size",
        type=int,
        default=defaults.shm_default_byte_size,
        help="python backend shared-memory region per model instance",
    )
    p.add_argument(
        "--grpc-tls",
        action="store_true",
        help="serve gRPC over TLS with the certificate and key of the kubernetes.io/tls Secret NAME-grpc-tls "
        "(HTTP, and the probes on it, stay plain)",
    )
    p.add_argument(
        "--grpc-tls-mutual",
        action="store_true",
        help="--grpc-tls, and serve only clients with a certificate signed by the Secret's ca.crt",
    )
    p.add_argument(
        "--no-gateway",
        dest="gateway",
        action="store_false",
        help="leave out the HTTP gateway container (`ernie-deploy gateway` beside Triton in the pod, calling it on "
        "127.0.0.1; its port on the Service). Needed with --grpc-tls, which the gateway cannot reach on 127.0.0.1",
    )
    p.add_argument("--gateway-cpu", default=defaults.gateway_cpu, help="the gateway container's CPU request")
    p.add_argument("--gateway-memory", default=defaults.gateway_memory, help="the gateway container's memory request")
    p.add_argument(
        "--gateway-memory-limit", default=defaults.gateway_memory_limit, help="the gateway container's memory limit"
    )
    p.set_defaults(func=run)


def options(args) -> ManifestOptions:
    return ManifestOptions(
        image=args.image,
        name=args.app_name,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        cpu_target=args.cpu_target,
        cpu=args.cpu,
        memory=args.memory,
        memory_limit=args.memory_limit,
        gpus=args.gpus,
        shm_default_byte_size=args.shm_default_byte_size,
        grpc_tls=args.grpc_tls or args.grpc_tls_mutual,
        grpc_tls_mutual=args.grpc_tls_mutual,
        gateway=args.gateway,
        gateway_cpu=args.gateway_cpu,
        gateway_memory=args.gateway_memory,
        gateway_memory_limit=args.gateway_memory_limit,
    )


def run(args) -> None:

    out = args.out or ("deploy/kserve" if args.kserve else "deploy/k8s")
    for path in write(args.repository, out, options(args), kserve=args.kserve):
        print(f"wrote {path}")
    # Both the Deployment and the InferenceService mount the admin key from a Secret that is never written to a file
    # here (see deployfiles/pod.py).
    print(f"The pods need the Secret {secret_name(args.app_name)} (the admin key); create it once per namespace:")
    print(f"  {secret_command(args.app_name)}")
    if args.grpc_tls or args.grpc_tls_mutual:
        print(f"and the gRPC TLS Secret {tls_secret_name(args.app_name)} (or let cert-manager write it):")
        print(f"  {tls_secret_command(args.app_name, args.grpc_tls_mutual)}")
