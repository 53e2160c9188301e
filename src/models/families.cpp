// The one list of model families. A new family (vgg, densenet, mobilenet, efficientnet, vit)
// declares its register_<family>_models in its own header and adds one line here; the order
// here is the display order of `ddpx models`.
#include "models/families.h"

#include "models/cifar_resnet.h"
#include "models/densenet.h"
#include "models/efficientnet.h"
#include "models/mlp.h"
#include "models/mobilenet.h"
#include "models/mobilenet_v3.h"
#include "models/resnet.h"
#include "models/vgg.h"
#include "models/vit.h"

namespace ddpx::models {

std::vector<ModelInfo> build_model_table() {
  std::vector<ModelInfo> table;
  register_resnet_models(table);
  register_cifar_resnet_models(table);
  register_vgg_models(table);
  register_densenet_models(table);
  register_mobilenet_models(table);
  register_mobilenet_v3_models(table);
  register_efficientnet_models(table);
  register_vit_models(table);
  register_mlp_models(table);
  return table;
}

}  // namespace ddpx::models
