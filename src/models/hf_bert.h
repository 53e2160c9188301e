// BERT weights both ways with Hugging Face transformers: a folder as save_pretrained writes a
// BertForMaskedLM (config.json + model.safetensors) to and from ddpx's BERT, whose parameters
// carry BertForMaskedLM's names (models/bert.h), so no tensor is renamed or transposed. What
// is bridged: transformers leaves the tied decoder weight out of the file (and may write
// cls.predictions.decoder.bias beside cls.predictions.bias, the same tensor); reading checks
// those equal and drops them, drops bert.embeddings.position_ids (a buffer older versions
// saved), and drops the pooler and the next-sentence head of a BertForPreTraining or BertModel
// folder (the hub's bert-base-uncased), which BertForMaskedLM does not have either. Old
// TensorFlow-era names (LayerNorm.gamma, .beta) are read as weight and bias. The folder reader
// is GPT-2's (models/hf_gpt2.h: safetensors, shards, or pytorch_model.bin).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "models/bert.h"

namespace ddpx::models {

// config.json as transformers' BertConfig writes it for `options` (BertForMaskedLM, gelu,
// layer_norm_eps 1e-12, absolute positions, tied embeddings).
std::string hf_bert_config_json(const BertOptions& options);

// Reads DIR/config.json: the options of the BERT it describes. Throws kData naming the file when
// it is not a BERT that ddpx computes (model_type, hidden_act, layer_norm_eps, position
// embedding type, untied embeddings, a decoder).
BertOptions read_hf_bert_config(const std::string& dir);

// The folder's tensors under ddpx's names (see above); `source` names the folder in errors.
std::map<std::string, torch::Tensor> from_hf_bert_tensors(std::map<std::string, torch::Tensor> hf,
                                                          const std::string& source);

// Writes DIR/config.json and DIR/model.safetensors (format pt), each atomically; creates DIR.
void export_hf_bert(const BertImpl& model, const std::string& dir);

// Loads a save_pretrained folder into `model` after checking its config against the model's
// (`model_name` names it in errors); all-or-nothing. Returns a one-line summary.
std::string load_hf_bert(const std::string& dir, BertImpl& model, const std::string& model_name);

}  // namespace ddpx::models
