#include "train/recipes.h"

namespace ddpx::train {

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> table = {
      {"fashion-mnist-demo",
       "the README demo: one epoch of Fashion-MNIST with the CIFAR ResNet-32 (full resolution "
       "into the first stage); AdamW, batch 32 per worker, no flip, channels_last, and --amp "
       "auto: bf16 on a CPU with native bf16 (AVX512-BF16 or AMX-BF16) or a GPU that has it, "
       "fp32 on an AVX2-only CPU, where bf16 is emulated",
       {{"--model", "resnet32"},
        {"--dataset", "fashion-mnist"},
        {"--num_epochs", "1"},
        {"--optimizer", "adamw"},
        {"--learning_rate", "0.002"},
        {"--weight_decay", "0.05"},
        {"--batch_size", "32"},
        {"--flip", "false"},
        {"--channels_last", "true"},
        {"--amp", "auto"}},
       2,
       "0.9005 test accuracy after 76 s of training in bf16 (seed 1: 0.9021), 2 workers on a "
       "2-core VM with AVX512-BF16 (2026-11-23); in fp32 on an AVX2-only VM 0.9000 after 273 s; "
       "ResNet-18 reached at most 0.8866 in one epoch"},
      {"fashion-mnist-best",
       "ResNet-18 (CIFAR stem) on Fashion-MNIST with random crop, flip and random erasing, label "
       "smoothing and EMA, aiming at >= 95.5% test accuracy",
       {{"--model", "resnet18"},
        {"--stem", "cifar"},
        {"--dataset", "fashion-mnist"},
        {"--num_epochs", "40"},
        {"--batch_size", "64"},
        {"--learning_rate", "0.1"},
        {"--lr_scale", "linear"},
        {"--base_batch_size", "128"},
        {"--weight_decay", "5e-4"},
        {"--warmup_epochs", "1"},
        {"--random_crop", "true"},
        {"--random_erasing", "0.25"},
        {"--label_smoothing", "0.1"},
        {"--ema_decay", "0.999"},
        {"--amp", "auto"}},
       2,
       "not yet run: an estimated 11 hours on the 2-core development VM (12x the demo's compute an "
       "epoch); minutes on a GPU"},
      {"cifar10-resnet18",
       "ResNet-18 (CIFAR stem) on CIFAR-10, the literature's ~95% recipe: SGD 0.1, cosine, 200 "
       "epochs, crop and flip, global batch 128",
       {{"--model", "resnet18"},
        {"--stem", "cifar"},
        {"--dataset", "cifar10"},
        {"--num_epochs", "200"},
        {"--batch_size", "128"},
        {"--batch_size_scaled", "true"},
        {"--learning_rate", "0.1"},
        {"--weight_decay", "5e-4"},
        {"--random_crop", "true"},
        {"--normalize", "dataset"},
        {"--amp", "auto"}},
       1,
       "not yet run: needs a GPU (about 2 GPU-hours); none was lent to this task"},
      {"cifar100-resnet18",
       "ResNet-18 (CIFAR stem) on CIFAR-100, the literature's ~77% recipe: as CIFAR-10 with "
       "label smoothing 0.1",
       {{"--model", "resnet18"},
        {"--stem", "cifar"},
        {"--dataset", "cifar100"},
        {"--num_epochs", "200"},
        {"--batch_size", "128"},
        {"--batch_size_scaled", "true"},
        {"--learning_rate", "0.1"},
        {"--weight_decay", "5e-4"},
        {"--random_crop", "true"},
        {"--label_smoothing", "0.1"},
        {"--normalize", "dataset"},
        {"--amp", "auto"}},
       1,
       "not yet run: needs a GPU (about 2 GPU-hours); none was lent to this task"},
      {"imagenet-resnet50",
       "the multi-GPU guide's case study: ResNet-50 on an ImageNet-layout folder (DATA_DIR/train "
       "and DATA_DIR/val), RandomResizedCrop(224) and flip, ImageNet normalisation, batch 256 per "
       "GPU, 8 loader threads, SGD 0.1 x global batch / 256, momentum 0.9, weight decay 1e-4, 90 "
       "epochs, the rate x0.1 every 30; give --data_dir",
       {{"--model", "resnet50"},
        {"--dataset", "imagenet"},
        {"--image_size", "224"},
        {"--num_epochs", "90"},
        {"--batch_size", "256"},
        {"--loader_workers", "8"},
        {"--optimizer", "sgd"},
        {"--learning_rate", "0.1"},
        {"--lr_scale", "linear"},
        {"--base_batch_size", "256"},
        {"--momentum", "0.9"},
        {"--weight_decay", "1e-4"},
        {"--lr_schedule", "step"},
        {"--lr_step_epochs", "30"},
        {"--lr_gamma", "0.1"},
        {"--normalize", "imagenet"},
        {"--channels_last", "true"},
        {"--amp", "auto"}},
       1,
       "not yet run: untested at full scale (no GPU and no ImageNet were lent to this task); the "
       "literature's ResNet-50 reaches about 76% top-1 with these settings"},
      {"shakespeare-char",
       "nanoGPT's train_shakespeare_char in its CPU size: gpt-nano (4 layers, 4 heads, 128 wide, "
       "context 64) on Shakespeare's characters, 2000 steps of 12 x 64 tokens (2 epochs of "
       "1000) from windows started anywhere in the text, AdamW 1e-3 with beta2 0.99, 100 steps of "
       "warmup then cosine to 1e-4, clip 1; "
       "tokenize first: `ddpx data "
       "tokenize data/tinyshakespeare/input.txt --tokenizer char --out data/shakespeare-char`",
       {{"--model", "gpt-nano"},
        {"--dataset", "tokens"},
        {"--data_dir", "data/shakespeare-char"},
        {"--seq_len", "64"},
        {"--windows", "random"},
        {"--batch_size", "12"},
        {"--num_epochs", "2"},
        {"--limit_train_batches", "1000"},
        {"--optimizer", "adamw"},
        {"--learning_rate", "1e-3"},
        {"--weight_decay", "0.1"},
        {"--adam_beta2", "0.99"},
        {"--warmup_epochs", "0.1"},
        {"--min_lr", "1e-4"},
        {"--clip_grad_norm", "1"}},
       1,
       "val loss 1.8983 after 2000 steps over the whole val split (nanoGPT's train.py on the same "
       "machine and data: 1.8981 so measured, 1.8857 by its 20-batch estimate), one process on a "
       "2-core Intel Xeon VM, 2026-12-07"},
      {"gpt2-124m",
       "llm.c's GPT-2 124M reproduction (train_gpt2.cu's command in its README): gpt2 on "
       "1024-token windows of GPT-2 tokens, 524,288 tokens a step (64 windows x 8 micro-batches "
       "on one GPU; on N GPUs --accumulation_steps 8/N), AdamW 6e-4 with betas (0.9, 0.95) and "
       "weight decay 0.1 on the matrices, 700 steps of warmup then cosine to 0, clip 1, bf16 "
       "where the hardware has it, one pass over the tokens (llm.c: FineWeb's 10B, 18,865 "
       "steps); tokenize first: `ddpx data tokenize CORPUS.txt --tokenizer gpt2 --vocab "
       "gpt2.tiktoken --out data/gpt2-tokens`",
       {{"--model", "gpt2"},
        {"--dataset", "tokens"},
        {"--data_dir", "data/gpt2-tokens"},
        {"--seq_len", "1024"},
        {"--batch_size", "64"},
        {"--accumulation_steps", "8"},
        {"--num_epochs", "1"},
        {"--optimizer", "adamw"},
        {"--learning_rate", "6e-4"},
        {"--adam_beta2", "0.95"},
        {"--weight_decay", "0.1"},
        {"--lr_schedule", "cosine"},
        {"--warmup_steps", "700"},
        {"--clip_grad_norm", "1"},
        {"--amp", "auto"}},
       1,
       "not yet run: needs a GPU (llm.c reaches a FineWeb val loss of about 3.28 with these "
       "settings on 10B tokens); its first steps on gpt-nano are checked (docs/recipes.md)"},
      {"bert-megatron",
       "Megatron-LM's BERT pretraining, the guide's second case study, in the shape of Megatron's "
       "examples/bert: bert-large (24 layers, 16 heads, 1024 wide) with masked-LM on 512-token "
       "windows of WordPiece tokens, split over 2 tensor-parallel ranks (heads, MLP and the "
       "vocabulary, padded to a multiple of 128 x 2 as Megatron pads it), a batch of 32 windows "
       "a data-parallel replica, AdamW 1e-4 with weight decay 0.01, warmup over the first 1% then "
       "cosine (Megatron's examples decay linearly), clip 1, bf16 where the hardware has it; "
       "tokenize first: `ddpx data tokenize CORPUS.txt --tokenizer wordpiece --vocab vocab.txt "
       "--out data/bert-wordpiece`",
       {{"--model", "bert-large"},
        {"--dataset", "tokens"},
        {"--data_dir", "data/bert-wordpiece"},
        {"--seq_len", "512"},
        {"--batch_size", "32"},
        {"--num_epochs", "1"},
        {"--optimizer", "adamw"},
        {"--learning_rate", "1e-4"},
        {"--weight_decay", "0.01"},
        {"--lr_schedule", "cosine"},
        {"--warmup_epochs", "0.01"},
        {"--clip_grad_norm", "1"},
        {"--tensor_parallel", "2"},
        {"--vocab_divisible_by", "128"},
        {"--amp", "auto"}},
       2,
       "not yet run: untested at full scale (bert-large on a corpus needs GPUs, and none were lent "
       "to this task); its first steps on bert-nano are checked (docs/recipes.md)"},
      {"seed-resnet101",
       "the seed's own command, unchanged: ResNet-101, SGD 0.002, 1024 per GPU, images in [-1, 1]",
       {{"--model", "resnet101"},
        {"--learning_rate", "0.002"},
        {"--optimizer", "sgd"},
        {"--batch_size", "1024"},
        {"--normalize", "neg_one_one"},
        {"--num_epochs", "10"}},
       2,
       "the seed's settings; not a tuned recipe (see cifar10-resnet18)"},
  };
  return table;
}

const Recipe* find_recipe(const std::string& name) {
  for (const auto& r : recipes())
    if (r.name == name) return &r;
  return nullptr;
}

std::string recipe_command(const Recipe& recipe) {
  std::string command;
  for (const auto& [flag, value] : recipe.flags) {
    if (!command.empty()) command += " ";
    if (value == "false") {
      command += "--no_" + flag.substr(2);  // the flags a recipe turns off all have a --no_ form
      continue;
    }
    command += flag;
    if (value != "true") command += " " + value;
  }
  return command;
}

}  // namespace ddpx::train
