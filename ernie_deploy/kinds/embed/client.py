"""How the client reads a vector per text: its row of the `embedding` output."""

from __future__ import annotations

import numpy as np

from ernie_deploy.client.kind_client import KindClient


def decode(row) -> np.ndarray:
    return np.asarray(row, dtype=np.float32)


# What the client layer reads of this kind (listed in client.wire): each text's whole row.
CLIENT = KindClient(decode=decode, row=True)
