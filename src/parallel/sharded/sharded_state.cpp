// Sharded checkpoints' state (see sharded_state.h).
#include "parallel/sharded/sharded_state.h"

#include <fmt/format.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/sharded/shard_layout.h"

namespace ddpx::parallel {
namespace {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key,
                       const std::string& name) {
  c10::IValue value;
  DDPX_CHECK(archive.try_read(key, value), ErrorKind::kData,
             "{}: the sharded checkpoint's index has no '{}'; it is damaged or from another "
             "ddpx, and cannot be resumed",
             name, key);
  return value;
}

torch::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key,
                          const std::string& where) {
  torch::Tensor t;
  DDPX_CHECK(archive.try_read(key, t), ErrorKind::kData,
             "{} has no '{}'; the part does not belong to this checkpoint's index", where, key);
  return t;
}

std::vector<int64_t> shape_of(const torch::Tensor& t) {
  DDPX_CHECK(t.scalar_type() == torch::kLong && t.dim() <= 1, ErrorKind::kData,
             "a sharded checkpoint's index holds a list of {} where a list of integers belongs; "
             "it is damaged or from another ddpx",
             c10::toString(t.scalar_type()));
  auto c = t.to(torch::kCPU).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Module::save's nesting: a module's own tensors, then an archive per child, by dotted names.
struct Node {
  std::vector<std::tuple<std::string, torch::Tensor, bool>> tensors;  // name, value, is_buffer
  std::map<std::string, Node> children;
};

Node& node_at(Node& root, const std::string& path) {
  Node* node = &root;
  size_t start = 0;
  while (start < path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    node = &node->children[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *node;
}

void put(Node& root, const std::string& dotted, const torch::Tensor& t, bool buffer) {
  const size_t dot = dotted.rfind('.');
  Node& owner = dot == std::string::npos ? root : node_at(root, dotted.substr(0, dot));
  owner.tensors.emplace_back(dot == std::string::npos ? dotted : dotted.substr(dot + 1), t, buffer);
}

void write_node(const Node& node, torch::serialize::OutputArchive& out) {
  for (const auto& [key, value, buffer] : node.tensors) out.write(key, value, buffer);
  for (const auto& [key, child] : node.children) {
    torch::serialize::OutputArchive sub(out.compilation_unit());
    write_node(child, sub);
    out.write(key, sub);
  }
}

struct Layout {
  int world = 0;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<int64_t>> holders;  // per parameter: the ranks holding its rows
  std::vector<std::vector<int64_t>> orders;   // per rank: model index of each optimizer parameter
};

Layout read_layout(ShardedParts& p) {
  Layout l;
  l.world = parts_world_size(p.index, p.name);
  DDPX_CHECK(static_cast<int>(p.parts.size()) == l.world, ErrorKind::kData,
             "{}: the index is for {} ranks, {} parts were read", p.name, l.world, p.parts.size());
  const int64_t count = read_value(p.index, "num_params", p.name).toInt();
  std::vector<int64_t> everyone(static_cast<size_t>(l.world));
  for (int q = 0; q < l.world; ++q) everyone[static_cast<size_t>(q)] = q;
  for (int64_t k = 0; k < count; ++k) {
    l.names.push_back(read_value(p.index, fmt::format("n{}", k), p.name).toStringRef());
    l.shapes.push_back(shape_of(read_tensor(p.index, fmt::format("s{}", k), p.name)));
    torch::Tensor holders;
    l.holders.push_back(p.index.try_read(fmt::format("h{}", k), holders) ? shape_of(holders)
                                                                         : everyone);
    DDPX_CHECK(!l.holders.back().empty(), ErrorKind::kData,
               "{}: the index gives parameter {} no part to hold it", p.name, l.names.back());
    for (int64_t q : l.holders.back()) {
      DDPX_CHECK(q >= 0 && q < l.world, ErrorKind::kData,
                 "{}: the index puts parameter {} in the part of rank {} of {}", p.name,
                 l.names.back(), q, l.world);
    }
  }
  torch::Tensor shared;
  const bool one_order = p.index.try_read("order", shared);
  for (int q = 0; q < l.world; ++q) {
    l.orders.push_back(
        shape_of(one_order ? shared : read_tensor(p.index, fmt::format("order{}", q), p.name)));
    for (int64_t k : l.orders.back()) {
      DDPX_CHECK(k >= 0 && k < count, ErrorKind::kData,
                 "{}: the index's optimizer order names parameter {} of {}", p.name, k, count);
    }
  }
  return l;
}

ShardShape shape_for(const std::vector<int64_t>& sizes, int world) {
  return shard_shape(torch::empty(sizes, torch::TensorOptions().device(torch::kMeta)), world);
}

std::string part_name(const ShardedParts& p, int q) {
  return fmt::format("{} (rank {}'s part)", p.name, q);
}

// Where rank q's part stands among parameter k's holders (its shard's index).
int position_of(const ShardedParts& p, const Layout& l, size_t k, int q) {
  const auto& holders = l.holders[k];
  const auto it = std::find(holders.begin(), holders.end(), q);
  DDPX_CHECK(it != holders.end(), ErrorKind::kData,
             "{}: its optimizer steps parameter {}, whose rows the index puts in other parts",
             part_name(p, q), l.names[k]);
  return static_cast<int>(it - holders.begin());
}

ShardShape shape_of_param(const Layout& l, size_t k) {
  return shape_for(l.shapes[k], static_cast<int>(l.holders[k].size()));
}

// Every parameter whole, in the model's order, from its holders' rows.
std::vector<torch::Tensor> whole_params(ShardedParts& p, const Layout& l) {
  std::vector<torch::Tensor> whole;
  for (size_t k = 0; k < l.names.size(); ++k) {
    const ShardShape shape = shape_of_param(l, k);
    torch::Tensor full;
    for (size_t i = 0; i < l.holders[k].size(); ++i) {
      const int q = static_cast<int>(l.holders[k][i]);
      const auto shard = read_tensor(p.parts[q], fmt::format("p{}", k), part_name(p, q));
      DDPX_CHECK(shard.numel() == shape.shard_numel(), ErrorKind::kData,
                 "{}: parameter {} has {} elements in the part, {} expected for shape {} over {} "
                 "ranks",
                 part_name(p, q), l.names[k], shard.numel(), shape.shard_numel(),
                 c10::str(l.shapes[k]), l.holders[k].size());
      if (!full.defined()) full = torch::empty(l.shapes[k], shard.options());
      put_shard(full, shape, static_cast<int>(i), shard.reshape({-1}));
    }
    whole.push_back(full);
  }
  return whole;
}

void write_model(ShardedParts& p, const Layout& l, const std::vector<torch::Tensor>& whole,
                 torch::serialize::OutputArchive& model) {
  Node root;
  const int64_t modules = read_value(p.index, "num_modules", p.name).toInt();
  for (int64_t j = 0; j < modules; ++j)
    node_at(root, read_value(p.index, fmt::format("m{}", j), p.name).toStringRef());
  for (size_t k = 0; k < whole.size(); ++k) put(root, l.names[k], whole[k], /*buffer=*/false);
  const int64_t buffers = read_value(p.index, "num_buffers", p.name).toInt();
  for (int64_t j = 0; j < buffers; ++j) {
    // In the index, or in the part of the rank "bh<j>" names.
    c10::IValue holder;
    torch::serialize::InputArchive* from = &p.index;
    std::string where = p.name;
    if (p.index.try_read(fmt::format("bh{}", j), holder)) {
      const int64_t q = holder.isInt() ? holder.toInt() : -1;
      DDPX_CHECK(q >= 0 && q < l.world, ErrorKind::kData,
                 "{}: the index puts buffer {} in the part of rank {} of {}", p.name, j, q,
                 l.world);
      from = &p.parts[static_cast<size_t>(q)];
      where = part_name(p, static_cast<int>(q));
    }
    put(root, read_value(p.index, fmt::format("bn{}", j), p.name).toStringRef(),
        read_tensor(*from, fmt::format("b{}", j), where), /*buffer=*/true);
  }
  write_node(root, model);
}

}  // namespace

void write_local_part(const std::vector<ShardUnit>& units,
                      const std::vector<std::vector<size_t>>& order,
                      torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& part) {
  std::vector<std::pair<size_t, torch::Tensor>> shards;
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t i = 0; i < units[u].shards().size(); ++i)
      shards.emplace_back(order[u][i], units[u].shards()[i]);
  }
  write_holder_part(shards, {}, &optimizer, part);
}

void write_holder_part(const std::vector<std::pair<size_t, torch::Tensor>>& params,
                       const std::vector<std::pair<size_t, torch::Tensor>>& buffers,
                       torch::optim::Optimizer* optimizer, torch::serialize::OutputArchive& part) {
  // A shard may be a view of a larger buffer (a resident unit's rows): written alone, not with
  // the buffer the archive would otherwise carry along.
  for (const auto& [k, rows] : params) {
    const bool alone = rows.storage_offset() == 0 && rows.storage().nbytes() == rows.nbytes();
    part.write(fmt::format("p{}", k), alone ? rows.detach() : rows.detach().clone());
  }
  for (const auto& [j, value] : buffers) part.write(fmt::format("b{}", j), value.detach());
  if (optimizer == nullptr) return;
  torch::serialize::OutputArchive state(part.compilation_unit());
  optimizer->save(state);
  part.write("optimizer", state);
}

namespace {

// What every index says: the world, the mode, the parameters' names and shapes, the modules
// and the buffers' names.
void write_names(torch::nn::Module& model, int world_size, ShardMode mode,
                 torch::serialize::OutputArchive& index) {
  index.write("world_size", c10::IValue(static_cast<int64_t>(world_size)));
  index.write("shard", c10::IValue(std::string(name(mode))));
  const auto named = model.named_parameters();
  index.write("num_params", c10::IValue(static_cast<int64_t>(named.size())));
  for (size_t k = 0; k < named.size(); ++k) {
    index.write(fmt::format("n{}", k), c10::IValue(named[k].key()));
    index.write(fmt::format("s{}", k), torch::tensor(named[k].value().sizes().vec(), torch::kLong));
  }
  const auto modules = model.named_modules("", /*include_self=*/false);
  index.write("num_modules", c10::IValue(static_cast<int64_t>(modules.size())));
  for (size_t j = 0; j < modules.size(); ++j)
    index.write(fmt::format("m{}", j), c10::IValue(modules[j].key()));
  const auto buffers = model.named_buffers();
  index.write("num_buffers", c10::IValue(static_cast<int64_t>(buffers.size())));
  for (size_t j = 0; j < buffers.size(); ++j)
    index.write(fmt::format("bn{}", j), c10::IValue(buffers[j].key()));
}

}  // namespace

void write_part_index(torch::nn::Module& model, const std::vector<std::vector<size_t>>& order,
                      int world_size, ShardMode mode, torch::serialize::OutputArchive& index) {
  write_names(model, world_size, mode, index);
  std::vector<int64_t> flat;
  for (const auto& unit : order)
    for (size_t k : unit) flat.push_back(static_cast<int64_t>(k));
  index.write("order", torch::tensor(flat, torch::kLong));
  const auto buffers = model.named_buffers();
  for (size_t j = 0; j < buffers.size(); ++j)
    index.write(fmt::format("b{}", j), buffers[j].value().detach());
}

void write_holders_index(torch::nn::Module& model, const PartHolders& holders, ShardMode mode,
                         torch::serialize::OutputArchive& index) {
  write_names(model, static_cast<int>(holders.orders.size()), mode, index);
  for (size_t k = 0; k < holders.params.size(); ++k)
    index.write(fmt::format("h{}", k), torch::tensor(holders.params[k], torch::kLong));
  for (size_t q = 0; q < holders.orders.size(); ++q)
    index.write(fmt::format("order{}", q), torch::tensor(holders.orders[q], torch::kLong));
  for (size_t j = 0; j < holders.buffers.size(); ++j)
    index.write(fmt::format("bh{}", j), c10::IValue(holders.buffers[j]));
}

int parts_world_size(torch::serialize::InputArchive& index, const std::string& name) {
  const int64_t world = read_value(index, "world_size", name).toInt();
  DDPX_CHECK(world >= 1 && world <= 1 << 20, ErrorKind::kData,
             "{}: the index gives a world size of {}", name, world);
  return static_cast<int>(world);
}

void assemble_model(ShardedParts& parts, torch::serialize::OutputArchive& model) {
  const Layout layout = read_layout(parts);
  write_model(parts, layout, whole_params(parts, layout), model);
}

void assemble_whole(ShardedParts& parts, const OptimizerFactory& make_optimizer,
                    torch::serialize::OutputArchive& model,
                    torch::serialize::OutputArchive& optimizer) {
  const Layout l = read_layout(parts);
  auto whole = whole_params(parts, l);
  write_model(parts, l, whole, model);

  std::vector<torch::Tensor> stand_ins;
  for (const auto& w : whole) {
    stand_ins.push_back(torch::zeros(w.sizes(), w.options()));
    stand_ins.back().set_requires_grad(true);
  }
  auto full = make_optimizer(stand_ins);
  // Per parameter: the first part's state object (scalars such as Adam's step) and its fields,
  // whole.
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> first(whole.size());
  std::vector<std::vector<torch::Tensor>> fields(whole.size());
  bool groups_copied = false;
  for (int q = 0; q < l.world; ++q) {
    const auto& order = l.orders[static_cast<size_t>(q)];
    if (order.empty()) continue;  // a part without an optimizer
    std::vector<torch::Tensor> shards;
    std::vector<int> positions;
    for (int64_t k : order) {
      positions.push_back(position_of(parts, l, static_cast<size_t>(k), q));
      shards.push_back(torch::zeros(shape_of_param(l, k).shard_sizes, whole[k].options()));
      shards.back().set_requires_grad(true);
    }
    auto local = make_optimizer(shards);
    torch::serialize::InputArchive state;
    try {
      parts.parts[q].read("optimizer", state);
      local->load(state);
    } catch (const c10::Error& e) {
      fail(ErrorKind::kData, "{}: its optimizer state does not match this optimizer: {}",
           part_name(parts, q), e.what_without_backtrace());
    }
    if (!groups_copied) copy_groups(*local, *full);
    groups_copied = true;
    for (size_t j = 0; j < order.size(); ++j) {
      const int64_t k = order[j];
      auto it = local->state().find(shards[j].unsafeGetTensorImpl());
      if (it == local->state().end()) continue;  // not stepped yet
      const auto tensors = state_tensors(*it->second);
      if (!first[k]) {
        first[k] = it->second->clone();
        for (const auto& t : tensors)
          fields[k].push_back(t.defined() ? torch::zeros(l.shapes[k], t.options()) : t);
      }
      const ShardShape shape = shape_of_param(l, k);
      for (size_t f = 0; f < tensors.size() && f < fields[k].size(); ++f) {
        if (tensors[f].defined() && fields[k][f].defined())
          put_shard(fields[k][f], shape, positions[j], tensors[f].reshape({-1}));
      }
    }
  }
  for (size_t k = 0; k < whole.size(); ++k) {
    if (!first[k]) continue;
    auto state = first[k]->clone();
    size_t f = 0;
    map_state(*state, [&](const torch::Tensor&) {
      while (f < fields[k].size() && !fields[k][f].defined()) ++f;
      return fields[k][f++];
    });
    full->state()[stand_ins[k].unsafeGetTensorImpl()] = std::move(state);
  }
  full->save(optimizer);
}

torch::serialize::InputArchive reopen(torch::serialize::OutputArchive& archive,
                                      const torch::Device& device) {
  std::ostringstream out;
  archive.save_to(out);
  std::istringstream in(out.str());
  torch::serialize::InputArchive result;
  result.load_from(in, device);
  return result;
}

}  // namespace ddpx::parallel
