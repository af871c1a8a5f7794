// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* tcpstall watch --fix: a sockops program attached to the watched command's cgroup
 * sets a socket option on each of its TCP connections once established. */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>

#define SOL_TCP 6
#define TCP_NODELAY 1
/* uapi/linux/bpf.h: the largest delayed-ACK timeout, in microseconds */
#define TCP_BPF_DELACK_MAX 1003

#define FIX_NODELAY 1
#define FIX_DELACK_MAX 2

volatile const __u32 fix_kind = 0;
volatile const __u32 delack_max_us = 0;

/* Index 0: sockets the option was set on; 1: sockets bpf_setsockopt refused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} fixed SEC(".maps");

SEC("sockops")
int apply_fix(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	int rc = -1;
	if (fix_kind == FIX_NODELAY) {
		int one = 1;
		rc = bpf_setsockopt(skops, SOL_TCP, TCP_NODELAY, &one, sizeof(one));
	} else if (fix_kind == FIX_DELACK_MAX) {
		int us = delack_max_us;
		rc = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_DELACK_MAX, &us, sizeof(us));
	}
	__u32 index = rc == 0 ? 0 : 1;
	__u64 *count = bpf_map_lookup_elem(&fixed, &index);
	if (count)
		__sync_fetch_and_add(count, 1);
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
