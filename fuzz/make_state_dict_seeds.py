# Seeds for fuzz_state_dict, written by Python's torch.save into the current folder. Each name
# ends in the writer's torch version (torch 2.x adds byteorder, .format_version and
# .data/serialization_id records); the names without one were written by Debian's torch 1.13.
#   Usage: cd fuzz/corpus/state_dict && python ../../make_state_dict_seeds.py
import collections, os, torch

_save = torch.save
_suffix = "_torch" + ".".join(torch.__version__.split("+")[0].split(".")[:2])


def save(obj, name):
    _save(obj, os.path.splitext(name)[0] + _suffix + ".pth")


torch.save = save
torch.manual_seed(0)
lin = torch.nn.Linear(3, 2)
torch.save(lin.state_dict(), "linear_ordereddict.pth")          # OrderedDict with _metadata
bn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1, bias=False), torch.nn.BatchNorm2d(2))
torch.save(bn.state_dict(), "conv_bn_ordereddict.pth")          # int64 num_batches_tracked
torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "v": torch.ones(1)},
           "plain_dict.pth")
base = torch.arange(12, dtype=torch.float64)
torch.save({"a": base[2:8].view(2, 3), "b": base.view(3, 4).t()}, "shared_storage_views.pth")
torch.save(collections.OrderedDict([("h", torch.ones(2, dtype=torch.float16)),
                                    ("i", torch.tensor([1, 2], dtype=torch.int32)),
                                    ("u", torch.tensor([3], dtype=torch.uint8)),
                                    ("s", torch.tensor(1.5))]), "dtypes_ordereddict.pth")
torch.save({"w": torch.zeros(0, 3), "b": torch.zeros(3)}, "empty_tensor.pth")
torch.save({"w": torch.ones(2)}, "single_entry_dict.pth")  # SETITEM: libtorch 1.13 rejected it
