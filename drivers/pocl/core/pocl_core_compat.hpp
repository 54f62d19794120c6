// Where PoCL 3.1 (patches/pocl-3.1-memlayer.patch) and PoCL 7.1
// (patches/pocl-7.1-memlayer-engine.patch) differ for memlayer's engine in
// PoCL's core: every version conditional of drivers/pocl/core is here, so
// the adapter (pocl_memlayer_migration.cpp) reads the same for both.
// MEMLAYER_POCL_MAJOR comes from core-tree.cmake (PoCL's MAJOR_VERSION).
//
// Thread-safety: as the PoCL functions each wraps.
#pragma once

extern "C" {
#include "pocl_mem_management.h"
#include "pocl_util.h"
}

#include <cstddef>
#include <cstdlib>
#include <span>

#include "pocl_node_pool.hpp"

#ifndef MEMLAYER_POCL_MAJOR
#error "MEMLAYER_POCL_MAJOR is not set (drivers/pocl/core-tree.cmake sets it from PoCL's MAJOR_VERSION)"
#endif

namespace memlayer::pocl_core::compat {

/// PoCL's event nodes for link(), two per link, taken before any event is
/// locked. pocl_create_event_sync takes them with both events locked and,
/// out of host memory, returns with both still locked (3.1 and 7.1; a
/// deadlock at the next lock of either): the adapter links through here
/// instead, so that a link cannot fail once the nodes are held. The nodes
/// held are a chain through their `next`; those left over go back as PoCL
/// frees a node, with this object.
class LinkNodes {
 public:
  LinkNodes() = default;
  LinkNodes(const LinkNodes&) = delete;
  LinkNodes& operator=(const LinkNodes&) = delete;
  ~LinkNodes() {
    while (held_ != nullptr) {
      event_node* n = held_;
      held_ = n->next;
      pocl_mem_manager_free_event_node(n);
    }
  }
  /// Holds the nodes of `links` links in all. False when out of host
  /// memory; what it held stays held.
  bool reserve(std::size_t links) { return count_ >= 2 * links || grow(links); }
  /// One node, cleared; precondition: reserve() made room for the link it
  /// is for.
  event_node* take() noexcept {
    event_node* n = held_;
    held_ = n->next;
    --count_;
    *n = event_node{};
    return n;
  }

 private:
  // reserve() when it holds too few, out of line: most commands find the
  // nodes the pool gave last time.
  [[gnu::noinline]] bool grow(std::size_t links) {
    std::size_t taken = 0, made = 0;
#ifndef USE_POCL_MEMMANAGER
    // Those PoCL has freed since (pocl_node_pool.hpp), all at once.
    event_node* last = nullptr;
    if (event_node* chain = node_pool().take_all(taken, last)) {
      last->next = held_;
      held_ = chain;
      count_ += taken;
    }
#endif
    bool enough = true;
    while (count_ < 2 * links) {
      event_node* n = new_node();
      if (n == nullptr) {
        enough = false;
        break;
      }
      n->next = held_;
      held_ = n;
      ++count_;
      ++made;
    }
    node_pool().took(taken, made);
    return enough;
  }

  // One node PoCL frees as one of its own (pocl_mem_manager_free_event_node).
  // Built without PoCL's memory manager (Debian's 3.1, our 7.1), PoCL
  // callocs each node: glibc's calloc passes by the thread caches that
  // malloc takes from first (≈ 200 instructions a node against 120:
  // doc/performance.md, where the gap at one argument is), so a node the
  // pool had none for comes from malloc. With the memory manager, its pool.
  static event_node* new_node() noexcept {
#ifdef USE_POCL_MEMMANAGER
    return pocl_mem_manager_new_event_node();
#else
    return static_cast<event_node*>(std::malloc(sizeof(event_node)));
#endif
  }

  event_node* held_ = nullptr;
  std::size_t count_ = 0;
};

/// `waiting` (a command not yet enqueued) runs only after `notifier` has
/// ended, and fails without running if it failed (our patches'
/// dependency_failed, which PoCL's pocl_command_enqueue and the memlayer
/// driver act on): pocl_create_event_sync's work, with two of `nodes`,
/// which hold room for this link (reserve()): it cannot fail. Nothing to
/// link when `notifier` has completed, or `waiting` waits for it already.
/// PoCL 7.1 locks the notifier first and gives its notify list a reference
/// to the waiting event (its pocl_broadcast drops it); 3.1 locks them in
/// id order, and the list holds none. `waiting` keeps the id of the newest
/// `notifier` (our patches' memlayer_linked_id), whatever the link came
/// to: pocl_command_enqueue then makes no in-order link to that event,
/// which would only find this one made (or the same end). (PoCL's event
/// tracing lists only the dependencies PoCL linked itself.)
inline void link(cl_event waiting, cl_event notifier, LinkNodes& nodes) {
  // PoCL's order for two events (pocl_lock_events_inorder, out of line
  // there: ≈ 45 instructions a link around the two locks and unlocks):
  // 3.1 locks the lower id first, 7.1 the notifier.
#if MEMLAYER_POCL_MAJOR >= 7
  const bool notifier_first = true;
#else
  const bool notifier_first = notifier->id < waiting->id;
#endif
  POCL_LOCK_OBJ(notifier_first ? notifier : waiting);
  POCL_LOCK_OBJ(notifier_first ? waiting : notifier);
  bool linked = false;
  for (event_node* item = waiting->wait_list; item != nullptr && !linked; item = item->next)
    linked = item->event == notifier;
  if (!linked && notifier->status < 0) {
    waiting->dependency_failed = 1;
  } else if (!linked && notifier->status != CL_COMPLETE) {
    event_node* target = nodes.take();
    event_node* item = nodes.take();
    target->event = waiting;
    item->event = notifier;
#if MEMLAYER_POCL_MAJOR >= 7
    POCL_RETAIN_OBJECT_UNLOCKED(waiting);
#endif
    LL_PREPEND(notifier->notify_list, target);
    LL_PREPEND(waiting->wait_list, item);
  }
  if (notifier->id > waiting->memlayer_linked_id) waiting->memlayer_linked_id = notifier->id;
  POCL_UNLOCK_OBJ(waiting);
  POCL_UNLOCK_OBJ(notifier);
}

/// A command on `queue` with no user wait list, for `buffers` (3.1 lists
/// them in the event; 7.1 in the node's migr_infos, which the caller sets).
inline cl_int create_command(_cl_command_node** node, cl_command_queue queue, cl_command_type type, cl_event* event_p,
                             std::span<cl_mem> buffers) {
#if MEMLAYER_POCL_MAJOR >= 7
  (void)buffers;
  return pocl_create_command_struct(node, queue, type, event_p, 0, nullptr, nullptr);
#else
  return pocl_create_command_struct(node, queue, type, event_p, 0, nullptr, buffers.size(), buffers.data());
#endif
}

/// Frees a command made by create_command() that was never enqueued and
/// has no event syncs: its event (every reference), the node, and what the
/// node holds (7.1: a reference to each migr_infos buffer; 3.1: none).
inline void discard_command(_cl_command_node* node) {
  cl_event ev = node->sync.event.event;
#if MEMLAYER_POCL_MAJOR >= 7
  // 7.1's CPU drivers free the per-event data they made when the event was
  // queued, asserting it exists: make it, as queueing would.
  cl_device_id dev = ev->queue->device;
  if (ev->data == nullptr && dev->ops->update_event != nullptr) dev->ops->update_event(dev, ev);
#else
  POCL_MEM_FREE(ev->mem_objs);
  ev->num_buffers = 0;
#endif
  POCL_LOCK_OBJ(ev);
  ev->pocl_refcount = 1;
  POCL_UNLOCK_OBJ(ev);
  POname(clReleaseEvent)(ev);
  pocl_mem_manager_free_command(node);
}

/// The buffer migration command `node` moves.
inline cl_mem migration_buffer(const _cl_command_node* node);

/// Frees a migration command made by create_command() and
/// set_migration_range() that was never enqueued, and its buffer reference.
inline void discard_migration(_cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  discard_command(node);  // the migr_infos entry releases the buffer
#else
  cl_mem mem = migration_buffer(node);
  discard_command(node);
  POname(clReleaseMemObject)(mem);
#endif
}

/// The buffer migration command `node` moves.
inline cl_mem migration_buffer(const _cl_command_node* node) {
#if MEMLAYER_POCL_MAJOR >= 7
  return node->migr_infos->buffer;
#else
  return node->sync.event.event->mem_objs[0];
#endif
}

/// Makes `node` (from create_command) move bytes [offset, offset + size) of
/// `mem`, whose reference the caller took for it (3.1: the migration's
/// release; 7.1: the migr_infos entry's). False when out of host memory.
inline bool set_migration_range(_cl_command_node* node, cl_mem mem, std::size_t offset, std::size_t size) {
  _cl_command_migrate& m = node->command.migrate;
#if MEMLAYER_POCL_MAJOR >= 7
  auto* entry = static_cast<pocl_buffer_migration_info*>(std::calloc(1, sizeof(pocl_buffer_migration_info)));
  if (entry == nullptr) return false;
  entry->buffer = mem;
  entry->offset = offset;
  entry->size = size;
  DL_APPEND(node->migr_infos, entry);
  m.num_buffers = 1;
  m.implicit = 1;
#else
  (void)mem;
  m.offset = offset;
  m.size = size;
#endif
  return true;
}

/// Makes `node` a copy from device `from`'s storage to the host copy; it
/// runs on `from`'s queue.
inline void point_to_host(_cl_command_node* node, cl_device_id from) {
  _cl_command_migrate& m = node->command.migrate;
  m.type = ENQUEUE_MIGRATE_TYPE_D2H;
#if MEMLAYER_POCL_MAJOR >= 7
  (void)from;  // pocl_exec_command reads the device that runs it
#else
  m.mem_id = &migration_buffer(node)->device_ptrs[from->global_mem_id];
#endif
}

/// Makes `node` a copy into device `dst` (which runs it): from the host copy
/// (`from` nullptr) or from device `from`.
inline void point_into_device(_cl_command_node* node, cl_device_id dst, cl_device_id from) {
  _cl_command_migrate& m = node->command.migrate;
  m.type = from == nullptr ? ENQUEUE_MIGRATE_TYPE_H2D : ENQUEUE_MIGRATE_TYPE_D2D;
  m.src_device = from;
#if MEMLAYER_POCL_MAJOR >= 7
  (void)dst;  // pocl_exec_command reads the device that runs it
#else
  pocl_mem_identifier* ids = migration_buffer(node)->device_ptrs;
  m.mem_id = from == nullptr ? &ids[dst->global_mem_id] : nullptr;
  m.src_id = from == nullptr ? nullptr : &ids[from->global_mem_id];
  m.dst_id = from == nullptr ? nullptr : &ids[dst->global_mem_id];
#endif
}

/// Whether `dev`'s migration commands move only their byte range (3.1: our
/// patch gave every driver's migrations a range).
inline bool honours_migration_ranges(cl_device_id dev) {
#if MEMLAYER_POCL_MAJOR >= 7
  return dev->honours_migration_ranges != CL_FALSE;
#else
  (void)dev;
  return true;
#endif
}

/// Whether `dev`'s driver copies a byte range from another device itself
/// (the direct path of a device-to-device migration it runs). 7.1:
/// pocl_exec_command moves a range through migrate_d2d_range; a driver with
/// no migrate_d2d runs its migrations itself (PoCL's remote driver: its
/// servers copy between themselves) and moves ranges in all of them when it
/// honours ranges at all.
inline bool migrates_d2d_ranges(cl_device_id dev) {
#if MEMLAYER_POCL_MAJOR >= 7
  return dev->ops->migrate_d2d_range != nullptr ||
         (dev->ops->migrate_d2d == nullptr && honours_migration_ranges(dev));
#else
  return dev->ops->migrate_d2d != nullptr;
#endif
}

/// Whether `dev`'s driver copies from another device itself at all (a whole
/// buffer, unless migrates_d2d_ranges()).
inline bool migrates_d2d(cl_device_id dev) {
#if MEMLAYER_POCL_MAJOR >= 7
  return dev->ops->migrate_d2d != nullptr || migrates_d2d_ranges(dev);
#else
  return migrates_d2d_ranges(dev);
#endif
}

/// PoCL 7.1 keeps in each sub-buffer its parent's storage address plus its
/// origin (per device, and the host copy's), and the commands that use a
/// sub-buffer read it there. Call with `parent` locked whenever its storage
/// on `dev` (nullptr: its host copy) was placed or freed, so that its
/// sub-buffers follow. A driver with sub-buffer objects of its own
/// (alloc_subbuffer: PoCL's remote driver, whose server makes a sub-buffer
/// of the parent's storage there) gets them made on placed storage and freed
/// with it (free_subbuffer). 3.1's core never sees a sub-buffer (our patch
/// makes each its parent plus an offset): nothing to do.
/// Returns CL_SUCCESS or the driver's alloc_subbuffer error. O(sub-buffers).
inline cl_int follow_parent(cl_mem parent, cl_device_id dev) {
#if MEMLAYER_POCL_MAJOR >= 7
  cl_mem_list_item_t* item = nullptr;
  LL_FOREACH(parent->sub_buffers, item) {
    cl_mem sub = item->mem;
    if (dev == nullptr) {
      sub->mem_host_ptr = parent->mem_host_ptr == nullptr ? nullptr : static_cast<char*>(parent->mem_host_ptr) + sub->origin;
      continue;
    }
    void* base = parent->device_ptrs[dev->global_mem_id].mem_ptr;
    pocl_mem_identifier& id = sub->device_ptrs[dev->global_mem_id];
    if (dev->ops->alloc_subbuffer == nullptr) {
      id.mem_ptr = base == nullptr ? nullptr : static_cast<char*>(base) + sub->origin;
      continue;
    }
    if (base == nullptr) {
      if (id.mem_ptr != nullptr && dev->ops->free_subbuffer != nullptr) dev->ops->free_subbuffer(dev, sub);
      id.mem_ptr = nullptr;
    } else if (id.mem_ptr == nullptr) {
      id.mem_ptr = static_cast<char*>(base) + sub->origin;  // as clCreateSubBuffer sets it for the driver
      const cl_int err = dev->ops->alloc_subbuffer(dev, sub);
      if (err != CL_SUCCESS) {
        id.mem_ptr = nullptr;
        return err;
      }
    }
  }
#else
  (void)parent;
  (void)dev;
#endif
  return CL_SUCCESS;
}

/// Whether the host holds a mapping of `parent` or (7.1) of one of its
/// sub-buffers: its storage must stay where the unmap writes it back.
inline bool mapped(cl_mem parent) {
  if (__atomic_load_n(&parent->map_count, __ATOMIC_ACQUIRE) != 0) return true;
#if MEMLAYER_POCL_MAJOR >= 7
  cl_mem_list_item_t* item = nullptr;
  LL_FOREACH(parent->sub_buffers, item) {
    if (__atomic_load_n(&item->mem->map_count, __ATOMIC_ACQUIRE) != 0) return true;
  }
#endif
  return false;
}

/// One unmap of `mem` is committed (memlayer's engine has its command, a
/// user and writer of the storage): a mapping clEnqueueUnmapMemObject
/// marked unmap_requested (1, before it made the command) becomes 2 (PoCL
/// only asks whether it is 0). Each committed unmap marks one; when two
/// threads unmap at once, the one marked may be the other's, but every
/// mapping is marked only once every unmap requested is committed.
inline void mark_unmap_committed(cl_mem mem) {
  POCL_LOCK_OBJ(mem);
  mem_mapping_t* m = nullptr;
  DL_FOREACH(mem->mappings, m) {
    if (m->unmap_requested != 1) continue;
    m->unmap_requested = 2;
    break;
  }
  POCL_UNLOCK_OBJ(mem);
}

/// Whether the unmap of every mapping the host holds of `parent` is
/// committed (mark_unmap_committed). False while (7.1) a sub-buffer of it
/// is mapped. Call with parent's lock held.
inline bool unmaps_committed(cl_mem parent) {
#if MEMLAYER_POCL_MAJOR >= 7
  cl_mem_list_item_t* item = nullptr;
  LL_FOREACH(parent->sub_buffers, item) {
    if (__atomic_load_n(&item->mem->map_count, __ATOMIC_ACQUIRE) != 0) return false;
  }
#endif
  mem_mapping_t* m = nullptr;
  DL_FOREACH(parent->mappings, m) {
    if (m->unmap_requested != 2) return false;
  }
  return true;
}

}  // namespace memlayer::pocl_core::compat
