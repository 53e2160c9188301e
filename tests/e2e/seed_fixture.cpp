#include "e2e/seed_fixture.h"

#include <gtest/gtest.h>

namespace ddpx::test {
namespace {

// Pixels (o + r*7 + c*3 + y*5 + x) % 256 in CHW rows, as the official batches store them.
const char* kPython = R"(
import os, pickle, tarfile, numpy as np
def rows(o, n):
    r, c, y, x = np.meshgrid(np.arange(n), np.arange(3), np.arange(32), np.arange(32),
                             indexing='ij')
    return ((o + r * 7 + c * 3 + y * 5 + x) % 256).astype(np.uint8).reshape(n, 3072)
def labels(o, n, k): return [int((o * 13 + r * 7) % k) for r in range(n)]
def dump(obj, path): pickle.dump(obj, open(path, 'wb'), protocol=2)  # as cPickle wrote them
def cifar100(data, archive_only):
    d = os.path.join(data, 'cifar-100-python'); os.makedirs(d)
    for name, o, n in (('train', 0, 16), ('test', 50, 8)):
        dump({b'filenames': [b'f.png'] * n, b'batch_label': name.encode(),
              b'fine_labels': labels(o, n, 100), b'coarse_labels': labels(o, n, 20),
              b'data': rows(o, n)}, os.path.join(d, name))
    dump({b'fine_label_names': [b'c%d' % i for i in range(100)],
          b'coarse_label_names': [b's%d' % i for i in range(20)]}, os.path.join(d, 'meta'))
    with tarfile.open(os.path.join(data, 'cifar-100-python.tar.gz'), 'w:gz') as t:
        t.add(d, arcname='cifar-100-python')
    if archive_only:
        for f in os.listdir(d): os.remove(os.path.join(d, f))
        os.rmdir(d)
def cifar10(data):
    d = os.path.join(data, 'cifar-10-batches-py'); os.makedirs(d)
    for b in range(1, 6):
        o, n = 10 * b, (4 if b == 1 else 3)
        dump({b'batch_label': b'training batch', b'labels': labels(o, n, 10),
              b'data': rows(o, n), b'filenames': [b'x.png'] * n},
             os.path.join(d, 'data_batch_%d' % b))
    dump({b'batch_label': b'testing batch', b'labels': labels(99, 8, 10), b'data': rows(99, 8),
          b'filenames': [b'x.png'] * 8}, os.path.join(d, 'test_batch'))
    dump({b'label_names': [b'airplane', b'automobile', b'bird', b'cat', b'deer', b'dog', b'frog',
                           b'horse', b'ship', b'truck'], b'num_vis': 3072, b'num_cases_per_batch': 10000},
         os.path.join(d, 'batches.meta'))
)";

}  // namespace

void write_seed_data(const std::string& dir, SeedData what) {
  std::string call;
  switch (what) {
    case SeedData::kCifar100:
      call = "cifar100(data, False)";
      break;
    case SeedData::kCifar100Archive:
      call = "cifar100(data, True)";
      break;
    case SeedData::kCifar10:
      call = "cifar10(data)";
      break;
  }
  auto r = run_python(std::string(kPython) + "data = os.path.join('" + dir +
                      "', 'data'); os.makedirs(data, exist_ok=True)\n" + call + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

CommandResult run_seed_command(const std::string& dir, const std::string& printed, int timeout_s) {
  std::string line = printed;
  const std::string seed_script = "./run-ddp.sh ";
  if (line.rfind(seed_script, 0) == 0) {
    line = shell_quote(source_dir() + "/run-ddp.sh") + " " + line.substr(seed_script.size());
  } else if (line.rfind("ddpx ", 0) == 0) {
    line = shell_quote(ddpx_binary()) + " " + line.substr(5);
  }
  return run_command("cd " + shell_quote(dir) + " && DDPX_BIN=" + shell_quote(ddpx_binary()) + " " +
                         kSeedLimits + " " + line,
                     timeout_s);
}

}  // namespace ddpx::test
