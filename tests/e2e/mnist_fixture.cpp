#include "e2e/mnist_fixture.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace ddpx::test {

void write_small_mnist(const std::string& dir) {
  auto r = test::run_python(fmt::format(R"(
import gzip, hashlib, os, random, struct
random.seed(7)
d = '{}'
def images(n):
    pixels = bytes(random.randrange(256) for _ in range(n * 28 * 28))
    return struct.pack('>IIII', 0x803, n, 28, 28) + pixels, pixels
def labels(n):
    return struct.pack('>II', 0x801, n) + bytes(i % 10 for i in range(n))
train, pixels = images(20)
test, _ = images(10)
blobs = {{'train-images-idx3-ubyte.gz': train, 'train-labels-idx1-ubyte.gz': labels(20),
          't10k-images-idx3-ubyte.gz': test, 't10k-labels-idx1-ubyte.gz': labels(10)}}
with open(os.path.join(d, 'MD5SUMS'), 'w') as sums:
    for name, raw in blobs.items():
        packed = gzip.compress(raw, mtime=0)
        open(os.path.join(d, name), 'wb').write(packed)
        sums.write(hashlib.md5(packed).hexdigest() + '  ' + name + '\n')
values = [p / 255 for p in pixels]
mean = sum(values) / len(values)
std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
open(os.path.join(d, 'stats'), 'w').write(f'{{mean}} {{std}}')
)",
                                        dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace ddpx::test
