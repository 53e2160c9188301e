#!/usr/bin/env python3
"""The PyTorch peer of `ddpx bench memory`: builds torchvision's model at the given input size,
runs one training step (forward, cross-entropy, backward, SGD with momentum 0.9) on a random
batch and prints resident memory before the build, after it and at the process's peak
(VmHWM), with the build and step times, in the same `memory key=value` line.
Runs under the torch ddpx was built against (DDPX_PYTHON, else .venv); see
bench/compare_memory.sh."""
import argparse
import time

import torch
import torchvision

TIMM_NAMES = {"vit_base_patch16_224": "vit_b_16", "vit_base_patch32_224": "vit_b_32",
              "vit_large_patch16_224": "vit_l_16"}


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise SystemExit(f"/proc/self/status has no {field} line; this benchmark needs Linux")


def build(name, num_classes, image_size):
    name = TIMM_NAMES.get(name, name)
    if name == "vit_tiny_patch4_32":  # ddpx's small ViT: torchvision's class, these settings
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=image_size, patch_size=4, num_layers=6, num_heads=3,
                                 hidden_dim=192, mlp_dim=768, num_classes=num_classes)
    kwargs = {"image_size": image_size} if name.startswith("vit_") else {}
    return getattr(torchvision.models, name)(num_classes=num_classes, **kwargs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image_size", type=int, required=True, help="input height = width")
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--threads", type=int, default=0, help="0: torch's default")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)

    baseline = status_mib("VmRSS")
    t = time.perf_counter()
    model = build(a.model, a.num_classes, a.image_size)
    build_s = time.perf_counter() - t
    built = status_mib("VmRSS")

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size)
    labels = torch.randint(a.num_classes, (a.batch_size,))
    t = time.perf_counter()
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    optimizer.step()
    loss = loss.item()
    step_s = time.perf_counter() - t
    peak = status_mib("VmHWM")
    print(f"# pytorch memory: {a.model}, {a.image_size}x{a.image_size} input, batch "
          f"{a.batch_size}, {a.num_classes} classes, one SGD-momentum step, loss {loss:.4f}")
    print(f"memory model={a.model} size={a.image_size} batch={a.batch_size} "
          f"baseline_mib={baseline:.1f} built_mib={built:.1f} peak_mib={peak:.1f} "
          f"build_s={build_s:.3f} step_s={step_s:.3f}")


if __name__ == "__main__":
    main()
