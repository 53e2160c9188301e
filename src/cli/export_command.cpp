// `ddpx export --checkpoint C --out W.pt`: a checkpoint's weights as a state_dict that Python's
// torchvision.models.NAME(num_classes=N).load_state_dict(torch.load("W.pt")) accepts.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/log.h"
#include "models/zoo/registry.h"
#include "train/checkpoint.h"
#include "train/pretrained.h"

namespace ddpx::cli {

void add_export_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("export", "write a checkpoint's weights as a PyTorch state_dict");
  auto checkpoint = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--checkpoint", *checkpoint, "a ddpx checkpoint (from --save_dir)")->required();
  cmd->add_option("--out", *out, "the state_dict file to write (torch.load reads it)")->required();
  cmd->callback([checkpoint, out, &exit_code] {
    train::CheckpointMeta meta = train::read_checkpoint_meta(*checkpoint);
    models::ModelConfig config;
    config.num_classes = meta.num_classes;
    config.stem = models::stem_from_name(meta.stem, *checkpoint + ": stem");
    if (meta.image_size > 0) config.image_size = meta.image_size;
    auto model = models::create_model(meta.model, config);
    train::load_checkpoint_weights(*checkpoint, *model.ptr());
    train::export_state_dict(*model.ptr(), *out);
    log::out(
        "wrote {} ({} {} classes): in Python, torchvision.models.{}(num_classes={})"
        ".load_state_dict(torch.load(\"{}\"))",
        *out, meta.model, meta.num_classes, meta.model, meta.num_classes, *out);
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
