#include "memlayer_device.hpp"

#include <algorithm>
#include <cstring>

namespace memlayer::pocl {

// One launch: the argument array every chunk starts from, with the device
// pointers of buffer arguments resolved once, and the work-group counter.
struct KernelRun {
  _cl_command_node* node = nullptr;
  pocl_kernel_metadata_t* meta = nullptr;
  pocl_workgroup_func workgroup = nullptr;
  pocl_context context{};
  std::size_t total_groups = 0;
  std::size_t chunk = 1;

  // arguments[i] points at argument i's value; local arguments and the
  // kernel's automatic locals are filled in per chunk. slots[i] holds what
  // a buffer, image or sampler argument passes: the device pointer (+
  // offset), &images[i], or the sampler.
  std::vector<void*> arguments;
  std::vector<void*> slots;
  std::vector<dev_image_t> images;  // only for kernels with image arguments

  std::size_t next_group = 0;            // guarded by the device's mutex
  std::atomic<std::size_t> done_groups{0};
  std::atomic<bool> failed{false};
  bool loaded = false;  // the work-group function is held (released by finish_kernel)
};

namespace {
constexpr std::size_t kLocalAlignment = MAX_EXTENDED_ALIGNMENT;
// Set on the workers' threads: the transfers they make are commands, drawn
// for by transfer_fails() before they start.
thread_local bool t_on_worker = false;
}

drivers::DevResult<std::unique_ptr<MemlayerDevice>> MemlayerDevice::create(cl_device_id device,
                                                                           const DriverParameters& params) {
  const std::string name = "memlayer" + std::to_string(device->dev_id);
  const int node = params.numa_node >= 0 ? params.numa_node
                                         : static_cast<int>(device->dev_id) % drivers::DeviceArena::numa_node_count();
  auto memory = drivers::DeviceMemory::create(name, params.global_mem, node, params.alignment);
  if (!memory.ok()) return memory.error();
  auto d = std::make_unique<MemlayerDevice>(Key{}, device, params, std::move(memory).value());
  for (unsigned i = 0; i < params.compute_units; ++i) {
    auto cu = d->make_compute_unit();
    if (!cu.ok()) return cu.error();
    d->units_.push_back(std::move(cu).value());
  }
  for (unsigned i = 0; i < params.compute_units; ++i) d->workers_.emplace_back([dev = d.get(), i] { dev->worker(i); });
  return d;
}

MemlayerDevice::MemlayerDevice(Key, cl_device_id device, const DriverParameters& params, drivers::DeviceMemory memory)
    : device_(device), params_(params), memory_(std::move(memory)) {}

MemlayerDevice::~MemlayerDevice() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

drivers::DevResult<std::unique_ptr<ComputeUnit>> MemlayerDevice::make_compute_unit() const {
  auto block = drivers::DeviceArena::create(params_.local_mem, memory_.arena().numa_node());
  if (!block.ok()) return memory_.name() + " local memory: " + block.error();
  auto local = bufalloc::LinearRegion::create(reinterpret_cast<std::uintptr_t>(block.value().data()),
                                              params_.local_mem);
  if (!local.ok()) return memory_.name() + " local memory: " + local.error().message();
  auto cu = std::make_unique<ComputeUnit>(
      ComputeUnit{std::move(block).value(), std::move(local).value(), std::vector<std::byte>(device_->printf_buffer_size),
                  {}, {}});
  return cu;
}

void MemlayerDevice::push(_cl_command_node* node) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Job{node, nullptr});
  }
  wake_.notify_one();
}

void MemlayerDevice::worker(unsigned index) {
  t_on_worker = true;
  memory_.arena().bind_current_thread();
  ComputeUnit& cu = *units_[index];
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Job& front = queue_.front();
    if (front.kernel) {
      std::shared_ptr<KernelRun> run = front.kernel;
      const std::size_t first = run->next_group;
      const std::size_t last = std::min(run->total_groups, first + run->chunk);
      run->next_group = last;
      if (last == run->total_groups) queue_.pop_front();
      lock.unlock();
      if (!run->failed.load(std::memory_order_relaxed) && !run_groups(*run, first, last, cu))
        run->failed.store(true);
      if (run->done_groups.fetch_add(last - first) + (last - first) == run->total_groups) finish_kernel(*run);
      lock.lock();
      continue;
    }
    _cl_command_node* node = front.node;
    queue_.pop_front();
    lock.unlock();
    const bool migration = node->type == CL_COMMAND_MIGRATE_MEM_OBJECTS;
    if (node->sync.event.event->dependency_failed) {
      // A dependency failed (driver_ops.cpp: notify): fail it, unrun. Here,
      // not in notify: every dependency has ended, so nothing names it.
      if (migration) compat::migration_ended(node);
      compat::fail_event(node->sync.event.event, "memlayer: a command it depends on failed");
    } else if (node->type == CL_COMMAND_NDRANGE_KERNEL) {
      cl_event event = node->sync.event.event;
      pocl_update_event_running(event);
      if (auto run = prepare_kernel(node)) {
        // Not compiled (finish_kernel fails it), or one chunk: no one to share it with.
        if (!run->loaded || run->chunk >= run->total_groups) {
          if (run->loaded && !run_groups(*run, 0, run->total_groups, cu)) run->failed.store(true);
          finish_kernel(*run);
          lock.lock();
          continue;
        }
        lock.lock();
        // Ahead of other commands: its work-groups are what every worker
        // should be taking now.
        queue_.push_front(Job{nullptr, std::move(run)});
        wake_.notify_all();
        continue;
      }
      POCL_UPDATE_EVENT_COMPLETE_MSG(event, "NDRange Kernel (empty) ");
    } else if (transfer_fails(node)) {
      // Failed before it started: marked as a command that did not run,
      // which memlayer's engine reads as cancelled (PoclHost::status).
      if (migration) compat::migration_ended(node);
      cl_event event = node->sync.event.event;
      POCL_LOCK_OBJ(event);
      event->dependency_failed = 1;
      POCL_UNLOCK_OBJ(event);
      const std::string why = migration ? migration_failure(node) : "memlayer: transfer failed (injected: transfer_faults)";
      POCL_MSG_ERR("%s\n", why.c_str());
      compat::fail_event(event, why.c_str());
    } else {
      if (migration) compat::migration_ended(node);
      if (migration && !params_.migration_ranges) compat::widen_to_whole_buffer(node);
      pocl_exec_command(node);
    }
    lock.lock();
  }
}

bool MemlayerDevice::transfer_fails(_cl_command_node* node) {
  const bool migration =
      node->type == CL_COMMAND_MIGRATE_MEM_OBJECTS && node->command.migrate.type != ENQUEUE_MIGRATE_TYPE_NOP;
  if (!migration) return counts_as_transfer(node->type) && draw_fault(params_.transfer_faults, transfers_);
  do {
    for (int tries = kMigrationTries; tries > 0; --tries)
      if (!migration_fault(node->command.migrate)) return false;
  } while (compat::retry_migration(node));
  return true;
}

bool MemlayerDevice::direct_transfer_fails(const char* what) {
  if (t_on_worker || !draw_fault(params_.transfer_faults, transfers_)) return false;
  POCL_MSG_ERR("memlayer: %s outside a command failed (injected: transfer_faults); its caller cannot tell\n", what);
  return true;
}

// What a migration that failed for good says: PoCL events carry no error
// message, so it goes to PoCL's error log (POCL_DEBUG=error shows it).
std::string MemlayerDevice::migration_failure(const _cl_command_node* node) {
  return "memlayer: migration of " + compat::migration_bytes(node) +
         " failed every try from every copy it could read (injected: transfer_faults, peer_read_faults)";
}

bool MemlayerDevice::migration_fault(const _cl_command_migrate& m) {
  if (draw_fault(params_.transfer_faults, transfers_)) return true;
  if (m.type != ENQUEUE_MIGRATE_TYPE_D2D || m.src_device == nullptr || !is_memlayer(m.src_device)) return false;
  auto& source = *static_cast<MemlayerDevice*>(m.src_device->data);
  return draw_fault(source.params_.peer_read_faults, source.peer_reads_);
}

bool MemlayerDevice::counts_as_transfer(cl_command_type type) {
  switch (type) {
    case CL_COMMAND_READ_BUFFER: case CL_COMMAND_WRITE_BUFFER: case CL_COMMAND_COPY_BUFFER:
    case CL_COMMAND_READ_BUFFER_RECT: case CL_COMMAND_WRITE_BUFFER_RECT: case CL_COMMAND_COPY_BUFFER_RECT:
    case CL_COMMAND_MIGRATE_MEM_OBJECTS:
      return true;
    default: return false;
  }
}

bool MemlayerDevice::draw_fault(double probability, std::atomic<std::uint64_t>& count) const {
  if (probability <= 0) return false;
  // splitmix64 of (seed, count): a uniform draw in [0, 1).
  std::uint64_t z = params_.fault_seed * 0x9E3779B97F4A7C15ull + count.fetch_add(1, std::memory_order_relaxed);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < probability;
}

std::shared_ptr<KernelRun> MemlayerDevice::prepare_kernel(_cl_command_node* node) const {
  cl_kernel kernel = node->command.run.kernel;
  const pocl_context& pc = node->command.run.pc;
  const std::size_t groups = pc.num_groups[0] * pc.num_groups[1] * pc.num_groups[2];
  if (groups == 0) return nullptr;
  auto run = std::make_shared<KernelRun>();
  run->node = node;
  run->context = pc;
  // The program's global variables, and the work-group function for this
  // launch's sizes (compiled if needed).
  if (!compat::setup_global_variables(node, run->context) || !compat::load_kernel(node)) {
    run->failed.store(true);  // finish_kernel fails the event
    return run;
  }
  run->loaded = true;
  run->meta = kernel->meta;
  run->workgroup = reinterpret_cast<pocl_workgroup_func>(node->command.run.wg);
  run->context.printf_buffer_capacity = static_cast<cl_uint>(device_->printf_buffer_size);
  run->total_groups = groups;
  // Enough chunks for every worker to take a few (load balance), few
  // enough that dealing them costs nothing next to running them.
  const std::size_t workers = std::max<std::size_t>(1, workers_.size());
  run->chunk = std::clamp<std::size_t>(groups / (workers * 4), 1, 256);

  const pocl_kernel_metadata_t* meta = run->meta;
  const unsigned n = meta->num_args;
  run->arguments.assign(n + meta->num_locals, nullptr);
  run->slots.assign(n, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    pocl_argument* al = &node->command.run.arguments[i];
    const pocl_argument_info& info = meta->arg_info[i];
    if (ARG_IS_LOCAL(info)) continue;  // per chunk
    if (info.type == POCL_ARG_TYPE_POINTER) {
      if (al->value != nullptr) {
        char* base = compat::is_raw_pointer(*al) ? *static_cast<char**>(al->value)
                                : static_cast<char*>((*static_cast<cl_mem*>(al->value))
                                                         ->device_ptrs[device_->global_mem_id].mem_ptr);
        run->slots[i] = base + al->offset;
      }
      run->arguments[i] = &run->slots[i];
    } else if (info.type == POCL_ARG_TYPE_IMAGE) {
      run->images.resize(n);  // once; later resizes keep the size, so &images[i] stays valid
      pocl_fill_dev_image_t(&run->images[i], al, device_);
      run->slots[i] = &run->images[i];
      run->arguments[i] = &run->slots[i];
    } else if (info.type == POCL_ARG_TYPE_SAMPLER) {
      static_assert(sizeof(dev_sampler_t) == sizeof(void*));
      dev_sampler_t sampler = 0;
      pocl_fill_dev_sampler_t(&sampler, al);
      run->slots[i] = reinterpret_cast<void*>(sampler);
      run->arguments[i] = &run->slots[i];
    } else {
      run->arguments[i] = al->value;
    }
  }
  return run;
}

bool MemlayerDevice::run_groups(KernelRun& run, std::size_t first, std::size_t last, ComputeUnit& cu) const {
  const pocl_kernel_metadata_t* meta = run.meta;
  const unsigned n = meta->num_args;
  std::vector<void*>& arguments = cu.arguments;
  std::vector<void*>& local_pointers = cu.local_pointers;
  arguments.assign(run.arguments.begin(), run.arguments.end());
  local_pointers.assign(arguments.size(), nullptr);

  // This chunk's local memory: the compute unit's space from its start.
  cu.local.reset();
  auto place = [&](std::size_t slot, std::uint64_t size) {
    auto a = cu.local.allocate(std::max<std::uint64_t>(size, 1), kLocalAlignment);
    if (!a.ok()) return false;
    local_pointers[slot] = reinterpret_cast<void*>(static_cast<std::uintptr_t>(a.value()));
    arguments[slot] = &local_pointers[slot];
    return true;
  };
  for (unsigned i = 0; i < n; ++i)
    if (ARG_IS_LOCAL(meta->arg_info[i]) && !place(i, run.node->command.run.arguments[i].size)) return false;
  for (unsigned j = 0; j < meta->num_locals; ++j)
    if (!place(n + j, meta->local_sizes[j])) return false;

  pocl_context pc = run.context;
  std::uint32_t position = 0;
  pc.printf_buffer = reinterpret_cast<uchar*>(cu.printf_buffer.data());
  pc.printf_buffer_position = &position;

  const compat::KernelFloatMode float_mode(device_, run.node->command.run.kernel->program);
  const std::size_t row = pc.num_groups[0];
  const std::size_t slice = pc.num_groups[0] * pc.num_groups[1];
  for (std::size_t g = first; g < last; ++g) {
    compat::KernelFloatMode::before_group();
    run.workgroup(reinterpret_cast<uchar*>(arguments.data()), reinterpret_cast<uchar*>(&pc), g % row,
                  (g % slice) / row, g / slice);
  }
  compat::write_printf_output(reinterpret_cast<char*>(pc.printf_buffer), position);
  return true;
}

void MemlayerDevice::finish_kernel(KernelRun& run) const {
  _cl_command_node* node = run.node;
  cl_event event = node->sync.event.event;
  if (!run.loaded) {
    POCL_MSG_ERR("memlayer: kernel %s could not be compiled for this launch\n", node->command.run.kernel->name);
    compat::fail_event(event, "memlayer: kernel not compiled");
    return;
  }
  compat::release_kernel(node);
  if (run.failed.load()) {
    // The enqueue-time check (PoCL patch) refuses launches whose locals
    // cannot fit; this is the backstop, failing the event, not the process.
    POCL_MSG_ERR("memlayer: kernel %s: local memory does not fit the device's %lu bytes\n",
                 node->command.run.kernel->name, static_cast<unsigned long>(params_.local_mem));
    compat::fail_event(event, "memlayer: local memory does not fit");
  } else {
    POCL_UPDATE_EVENT_COMPLETE_MSG(event, "NDRange Kernel        ");
  }
}

void MemlayerDevice::run_inline(_cl_command_node* node) {
  // pocl_exec_command() updates the event around this call.
  auto run = prepare_kernel(node);
  if (!run) return;
  if (!run->loaded) {
    POCL_MSG_ERR("memlayer: kernel %s could not be compiled for this launch\n", node->command.run.kernel->name);
    return;
  }
  auto cu = make_compute_unit();
  const bool ran = cu.ok() && run_groups(*run, 0, run->total_groups, *cu.value());
  compat::release_kernel(node);
  if (!ran) POCL_MSG_ERR("memlayer: kernel %s did not run: no local memory for it\n", node->command.run.kernel->name);
}

}  // namespace memlayer::pocl
