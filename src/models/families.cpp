// The one list of model families. A new family (vgg, densenet, mobilenet, efficientnet, vit)
// declares its register_<family>_models in its own header and adds one line here; the order
// here is the display order of `ddpx models`.
#include "models/families.h"

#include "models/mlp.h"
#include "models/mobilenet.h"
#include "models/resnet.h"
#include "models/vgg.h"

namespace ddpx::models {

std::vector<ModelInfo> build_model_table() {
  std::vector<ModelInfo> table;
  register_resnet_models(table);
  register_vgg_models(table);
  register_mobilenet_models(table);
  register_mlp_models(table);
  return table;
}

}  // namespace ddpx::models
