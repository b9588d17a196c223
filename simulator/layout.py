"""The pool's hardware: nodes, physical GPUs and the devices the scheduler hands out.

A device is what dcgm-exporter reports as one series and what a pod is bound to: a whole GPU,
one MIG instance (`UUID` is the parent's, `GPU_I_ID` tells the instances apart), or a
time-sliced GPU that up to `TIME_SLICE_REPLICAS` pods hold at once. The scheduler also hands a
time-sliced GPU out whole to a pod that asks for a whole GPU while no time-sliced pod holds it,
so one GPU switches between exclusive and shared use, often within the hour: dcgm-exporter then
writes only the pod's series (no bare one), as for any exclusively held GPU.

Shares are kept in 84ths of a GPU: 84 = lcm(7, 1, 2, 3, 4), so a MIG instance (slices/7) and a
time-sliced holder (1/k, k <= 4) are whole numbers of 84ths and every truth amount stays exact.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.workload import Pod

MODEL_NAME = "NVIDIA H100 80GB HBM3"
GPU_MEMORY_MIB = 81559
# A mixed pool's nodes cycle through these (model, MiB, can be cut into MIG instances): MIG
# on the H100 and A100 nodes, time-slicing on all (an L40S has no MIG).
MIXED_MODELS = (
    (MODEL_NAME, GPU_MEMORY_MIB, True),
    ("NVIDIA A100-SXM4-80GB", 81920, True),
    ("NVIDIA L40S", 46068, False),
)
SHARE_UNITS = 84
TIME_SLICE_REPLICAS = 4
IDLE_POWER_W = 70.0
POWER_PER_BUSY_PERCENT_W = 6.3

# (profile, memory MiB); slices are the leading number of the profile.
MIG_PROFILE_MEMORY_MIB = {"1g.10gb": 9856, "2g.20gb": 19968, "3g.40gb": 40192, "4g.40gb": 40192}
# Valid H100/A100-80GB partitions (compute slices sum to 7), with the instance ids NVML assigns.
MIG_LAYOUTS = (
    (("3g.40gb", "2"), ("2g.20gb", "3"), ("1g.10gb", "9"), ("1g.10gb", "10")),
    (("4g.40gb", "1"), ("2g.20gb", "5"), ("1g.10gb", "13")),
)
# (Hostname label key, pod label style, cAdvisor reports container level too): nodes cycle
# through these so that even a two-node pool shows every exporter variant.
NODE_VARIANTS = (
    ("Hostname", "pod", True),
    ("hostname", "exported_pod", False),
    ("Hostname", "exported_pod", False),
    ("hostname", "pod", True),
)


def mig_slices(profile: str) -> int:
    return int(profile.split("g.", 1)[0])


@dataclass(eq=False)
class Device:
    gpu: Gpu
    mode: str  # whole | mig | timesliced
    memory_mib: int
    share_units: int  # of a whole device, in 84ths (a time-sliced GPU is split at each tick)
    profile: str = ""
    instance_id: str = ""
    labels: str = ""  # dcgm-exporter labels without pod attribution
    holders: list[Pod] = field(default_factory=list)
    reserved_for: Pod | None = None
    energy_mj: int = 0

    @property
    def node(self) -> Node:
        return self.gpu.node

    @property
    def available(self) -> bool:
        return self.gpu.present and self.gpu.node.present

    @property
    def exclusive(self) -> bool:
        """Held whole by one pod that asked for a whole GPU (a time-sliced GPU can be: the
        scheduler hands it out whole when no time-sliced pod holds it)."""
        return bool(self.holders) and self.holders[0].task.request_mode == "whole"

    @property
    def sliced(self) -> bool:
        """Time-sliced right now: dcgm-exporter writes the bare series beside its pods' ones."""
        return self.mode == "timesliced" and not self.exclusive

    def capacity_left(self) -> int:
        if self.exclusive:
            return 0
        limit = TIME_SLICE_REPLICAS if self.mode == "timesliced" else 1
        return limit - len(self.holders)


@dataclass(eq=False)
class Gpu:
    node: Node
    index: int
    uuid: str
    mode: str
    devices: list[Device] = field(default_factory=list)
    model: str = MODEL_NAME
    memory_mib: int = GPU_MEMORY_MIB
    present: bool = True
    down_until: int = 0


@dataclass(eq=False)
class Node:
    index: int
    name: str
    ip: str
    hostname_label: str
    pod_label_style: str
    cadvisor_container_level: bool
    gpus: list[Gpu] = field(default_factory=list)
    present: bool = True
    down_until: int = 0
    serves: str = ""  # "" any work; "inference" or "training" when the pools are separate

    @property
    def pod_label_keys(self) -> tuple[str, str, str]:
        """(container, namespace, pod) label keys as Prometheus stores them on this node."""
        if self.pod_label_style == "exported_pod":
            return ("exported_container", "exported_namespace", "exported_pod")
        return ("container", "namespace", "pod")


def fake_uuid(rng: random.Random) -> str:
    hexdigits = f"{rng.getrandbits(128):032x}"
    parts = (hexdigits[:8], hexdigits[8:12], hexdigits[12:16], hexdigits[16:20], hexdigits[20:])
    return "-".join(parts)


def node_sizes(gpus: int, most: int = 8) -> list[int]:
    """GPUs per node: at least two nodes (both exporter variants), at most `most` GPUs each."""
    nodes = max(2 if gpus >= 2 else 1, -(-gpus // most))
    base, extra = divmod(gpus, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


def build_layout(
    gpus: int,
    rng: random.Random,
    *,
    first_node: int = 0,
    whole_only: bool = False,
    mixed_models: bool = False,
) -> list[Node]:
    """Nodes numbered from `first_node`; `whole_only` leaves out the MIG and time-sliced GPUs
    (an inference pool of its own serves from whole GPUs only). `mixed_models`: node n has
    model MIXED_MODELS[n % 3], and every node of three GPUs or more one time-sliced GPU and,
    where the model allows, one MIG GPU (the uniform pool's layout is unchanged)."""
    nodes = []
    # A mixed pool's nodes are smaller (four GPUs at most), so a few GPUs show every model.
    sizes = node_sizes(gpus, 4 if mixed_models else 8)
    for index, size in enumerate(sizes, start=first_node):
        hostname_label, pod_style, container_level = NODE_VARIANTS[index % len(NODE_VARIANTS)]
        node = Node(
            index=index,
            name=f"gpu-node-{index + 1:02d}",
            # 10.42.0.11 on: past .255 the address carries into the third octet (a pool of
            # more than 244 nodes), so every node's dcgm-exporter has an address of its own.
            ip=f"10.42.{(11 + index) // 256}.{(11 + index) % 256}",
            hostname_label=hostname_label,
            pod_label_style=pod_style,
            cadvisor_container_level=container_level,
        )
        model, memory, can_mig = MIXED_MODELS[index % len(MIXED_MODELS)]
        if not mixed_models:
            model, memory, can_mig = MODEL_NAME, GPU_MEMORY_MIB, True
        # Every third node (the first one included) has one MIG and one time-sliced GPU; in a
        # mixed pool every node of three GPUs or more does, but an L40S none.
        mixed = size >= 3 and (mixed_models or index % 3 == 0) and not whole_only
        for gpu_index in range(size):
            mode = "whole"
            if mixed and gpu_index == size - 1:
                mode = "mig" if can_mig else "timesliced"
            elif mixed and gpu_index == size - 2:
                mode = "timesliced"
            gpu = Gpu(
                node=node,
                index=gpu_index,
                uuid=f"GPU-{fake_uuid(rng)}",
                mode=mode,
                model=model,
                memory_mib=memory,
            )
            _add_devices(gpu, layout=MIG_LAYOUTS[index % len(MIG_LAYOUTS)], rng=rng)
            node.gpus.append(gpu)
        nodes.append(node)
    return nodes


def _add_devices(gpu: Gpu, *, layout: tuple[tuple[str, str], ...], rng: random.Random) -> None:
    node = gpu.node
    base = (
        f'gpu="{gpu.index}",UUID="{gpu.uuid}",device="nvidia{gpu.index}",'
        f'modelName="{gpu.model}",{node.hostname_label}="{node.name}"'
    )
    target = f'job="dcgm-exporter",instance="{node.ip}:9400"'
    # Energy counters count since the GPU booted, not since the simulation started.
    boot_energy = rng.randrange(10**9, 10**11)
    if gpu.mode != "mig":
        gpu.devices.append(
            Device(
                gpu=gpu,
                mode=gpu.mode,
                memory_mib=gpu.memory_mib,
                share_units=SHARE_UNITS,
                labels=f"{base},{target}",
                energy_mj=boot_energy,
            )
        )
        return
    for profile, instance_id in layout:
        slices = mig_slices(profile)
        gpu.devices.append(
            Device(
                gpu=gpu,
                mode="mig",
                memory_mib=MIG_PROFILE_MEMORY_MIB[profile],
                share_units=slices * SHARE_UNITS // 7,
                profile=profile,
                instance_id=instance_id,
                labels=f'{base},GPU_I_PROFILE="{profile}",GPU_I_ID="{instance_id}",{target}',
                energy_mj=boot_energy * slices // 7,
            )
        )


def describe_nodes(nodes: list[Node]) -> list[dict]:
    """The `meta.nodes` part of truth.json."""
    return [
        {
            "name": node.name,
            "hostname_label": node.hostname_label,
            "pod_label_style": node.pod_label_style,
            "gpus": [
                {
                    "UUID": gpu.uuid,
                    "gpu": str(gpu.index),
                    "mode": gpu.mode,
                    "modelName": gpu.model,
                    "instances": [
                        {"GPU_I_ID": d.instance_id, "GPU_I_PROFILE": d.profile}
                        for d in gpu.devices
                        if d.mode == "mig"
                    ],
                }
                for gpu in node.gpus
            ],
        }
        for node in nodes
    ]
