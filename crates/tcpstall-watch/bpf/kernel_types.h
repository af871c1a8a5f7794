/* The kernel types the watch programs read, reduced to the fields they use. Every
 * struct carries preserve_access_index, so clang records each field access as a CO-RE
 * relocation and the loader fixes offsets from the running kernel's BTF
 * (/sys/kernel/btf/vmlinux); the layouts below only need the right field names. */
#ifndef TCPSTALL_KERNEL_TYPES_H
#define TCPSTALL_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef __u16 __sum16;

enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

/* uapi/linux/bpf.h: bpf_ringbuf_submit's flag to submit without notifying the reader. */
enum {
	BPF_RB_NO_WAKEUP = 1,
};

/* uapi/linux/bpf.h: the sockops callbacks where a connection is established. */
enum {
	BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB = 4,
	BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB = 5,
};

/* The sockops context (uapi, fixed ABI): only the callback number is read. */
struct bpf_sock_ops {
	__u32 op;
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct in6_addr {
	__u8 s6_addr[16];
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct inode {
	unsigned long i_ino;
};

struct file {
	struct inode *f_inode;
};

struct socket {
	struct file *file;
};

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

/* include/linux/cgroup-defs.h: the cgroup v2 the socket was created in. */
struct sock_cgroup_data {
	struct cgroup *cgroup;
};

/* include/net/sock.h: a process holds the socket (sock_owned_by_user). */
typedef struct {
	int owned;
} socket_lock_t;

struct sock {
	struct sock_common __sk_common;
	socket_lock_t sk_lock;
	struct socket *sk_socket;
	struct sock_cgroup_data sk_cgrp_data;
};

struct timer_list {
	void (*function)(struct timer_list *);
};

struct inet_connection_sock {
	struct timer_list icsk_delack_timer;
	struct {
		__u8 pending;
	} icsk_ack;
};

struct minmax_sample {
	__u32 t;
	__u32 v;
};

struct minmax {
	struct minmax_sample s[3];
};

struct tcp_sock {
	__u32 rcv_nxt;
	__u32 write_seq;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 snd_sml;
	__u32 packets_out;
	__u32 mss_cache;
	__u16 advmss;
	__u32 snd_wnd;
	__u32 srtt_us;
	__u32 mdev_us;
	struct minmax rtt_min;
	__u64 tcp_clock_cache;
	__u32 data_segs_in;
	__u32 data_segs_out;
	__u8 nonagle : 4;
	__u8 compressed_ack;
};

struct sk_buff {
	unsigned int len;
	unsigned char *data;
};

struct tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
};

#pragma clang attribute pop

#endif
