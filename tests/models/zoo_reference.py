# Reference logits for the zoo parity test (zoo_formula_parity_test.cpp), many models in one
# python process: each model is built with torchvision 0.14, every float tensor of its
# state_dict is drawn from a seeded generator that the C++ test repeats (so no weight file has
# to travel: VGG's are 500 MB, ViT-L's 1.2 GB), then it runs in eval mode on a seeded input, and
# OUT/<name>.pt holds {'x': input, 'y': logits}.
#
# main(out_dir, specs) with specs like ["resnet18:32", "vit_b_16:32"]: a torchvision builder
# name (or vit_tiny_patch4_32) and the input side. ViTs are filled at their default size and
# then moved to the input size with torchvision's interpolate_embeddings (bilinear), which is
# what ddpx does per input.
import math

import torch
import torch.nn as nn
import torchvision
from torchvision.models.vision_transformer import VisionTransformer, interpolate_embeddings

NUM_CLASSES = 10
BATCH = 2


def skip_initialisation():
    """Every tensor is overwritten, so torchvision's random init is wasted time (seconds for
    VGG and ViT-L): make it a no-op."""
    nn.Conv2d.reset_parameters = lambda self: None
    nn.Linear.reset_parameters = lambda self: None
    for name in dir(nn.init):
        if name.endswith("_") and not name.startswith("_"):
            setattr(nn.init, name, lambda t, *a, **k: t)


def fill(model):
    """Every float tensor of the state_dict, number `index` in sorted-name order (integer
    buffers counted too), is drawn from torch's CPU generator seeded with `index`, uniformly
    in a range set by the tensor's role. libtorch's generator is the same in C++, so the test
    draws the same values; uniform_ runs serially, so thread counts do not matter."""
    sd = model.state_dict()
    with torch.no_grad():
        for index, name in enumerate(sorted(sd)):
            t = sd[name]
            if not t.is_floating_point():
                continue
            torch.manual_seed(index)
            if name.endswith("running_var"):
                t.uniform_(0.5, 1.5)
            elif t.dim() == 1 and name.endswith("weight"):  # BatchNorm / LayerNorm scale
                t.uniform_(0.7, 1.3)
            elif t.dim() == 1:  # biases, running_mean
                t.uniform_(-0.1, 0.1)
            elif name in ("class_token", "encoder.pos_embedding"):
                t.uniform_(-0.5, 0.5)
            else:  # He uniform: variance 2 / fan_in
                bound = math.sqrt(6.0 / (t.numel() // t.shape[0]))
                t.uniform_(-bound, bound)


def rng_fingerprint():
    """Sum of 1000 draws after manual_seed(0): the C++ test checks its generator agrees."""
    torch.manual_seed(0)
    return torch.empty(1000).uniform_(-1, 1).double().sum().item()


def build(name):
    if name == "vit_tiny_patch4_32":  # ddpx's small ViT: torchvision's class, these settings
        return VisionTransformer(image_size=32, patch_size=4, num_layers=6, num_heads=3,
                                 hidden_dim=192, mlp_dim=768, num_classes=NUM_CLASSES)
    return getattr(torchvision.models, name)(num_classes=NUM_CLASSES)


def reference(name, size, out_dir):
    model = build(name)
    fill(model)
    if isinstance(model, VisionTransformer) and model.image_size != size:
        sd = interpolate_embeddings(size, model.patch_size, model.state_dict(), "bilinear")
        model.encoder.pos_embedding = nn.Parameter(sd["encoder.pos_embedding"])
        model.image_size = size
    model.eval()
    torch.manual_seed(0)
    x = torch.randn(BATCH, 3, size, size)
    with torch.no_grad():
        y = model(x)
    torch.save({"x": x, "y": y}, f"{out_dir}/{name}.pt")
    print("REF", name, size, f"{y.abs().max().item():.4g}", flush=True)


def main(out_dir, specs):
    # One thread, as the C++ side: deep random-weight nets (efficientnet_b7: 12% of the output
    # scale) amplify the different summation order of another thread count.
    torch.set_num_threads(1)
    print("REF rng", repr(rng_fingerprint()), flush=True)
    skip_initialisation()
    for spec in specs:
        name, size = spec.split(":")
        reference(name, int(size), out_dir)
