// `ddpx data info DIR` for an image folder: its classes with their counts, the formats found, the
// distribution of image sizes, and every file that cannot be read, with the reason (what training
// would refuse at start).
#pragma once

#include <string>
#include <vector>

#include "data/image_index.h"

namespace ddpx::data {

// The report's lines, in order; the unreadable files last, one a line.
std::vector<std::string> describe_image_folder(const ImageIndex& index);

}  // namespace ddpx::data
