// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* tcpstall watch: reports each Nagle hold that ends, each delayed-ACK timer that fires
 * with an ACK pending, and, on the side that delayed the ACK, the peer's next segment
 * after such a timer. Tracepoints only (tp_btf), no kprobes:
 *   sock:sock_send_length  after a send, in the sender's process: bytes Nagle held
 *                          (most sends leave none, and cost only that test)
 *   tcp:tcp_probe          an incoming segment: its ACK may release the held bytes; on a
 *                          socket whose delayed-ACK timer fired, it is the peer's answer
 *   timer:timer_expire_entry  the delayed-ACK timer fired (filtered on its function)
 *   tcp:tcp_destroy_sock   clean-up
 * Kernel facts are from Linux v6.18 (net/ipv4/tcp_input.c, tcp_timer.c, tcp_output.c).
 * The layout of struct watch_event is mirrored in src/event.rs. */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
/* include/net/tcp.h */
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2
/* include/net/inet_connection_sock.h: the delayed-ACK timer has an ACK to send */
#define ICSK_ACK_TIMER 2
/* ... and a segment smaller than the receive MSS arrived since the last ACK left:
 * tcp_measure_rcv_mss sets it for such a segment, and tcp_event_ack_sent ->
 * inet_csk_clear_xmit_timer(sk, ICSK_TIME_DACK) clears every pending bit when an ACK
 * leaves. */
#define ICSK_ACK_PUSHED 4

#define EVENT_NAGLE_HOLD 1
#define EVENT_DELACK_FIRED 2
#define EVENT_DELAYER_SIDE 3

/* watch_event.flags */
#define FIRED_DEFERRED 1

/* Set by the loader before the programs load. */
volatile const __u64 target_cgroup = 0;  /* 0: every cgroup */
volatile const __u64 delack_timer_fn = 0; /* address of tcp_delack_timer */
/* Holds shorter than this are reported without waking user space (it polls anyway). */
volatile const __u64 min_hold_ns = 1000000;

struct hold {
	__u64 start_ns;
	__u32 release_seq;
	__u32 held_bytes;
	__u32 pid;
	__u32 mss;
	__u64 cgroup;
	char comm[16];
};

struct watch_event {
	__u32 kind;
	__u32 pid;
	__u64 start_ns;
	__u64 end_ns;
	__u64 cgroup;
	__u32 held_bytes;
	__u32 srtt_us;
	__u32 mss;
	__u16 family;
	__u16 local_port;
	__u16 remote_port;
	/* EVENT_DELACK_FIRED: FIRED_DEFERRED when a process held the socket. */
	__u16 flags;
	__u8 local_addr[16];
	__u8 remote_addr[16];
	char comm[16];
	/* EVENT_DELACK_FIRED, EVENT_DELAYER_SIDE: the socket's inode, by which user space
	 * names its process (socket:[inode] in /proc/PID/fd); 0 when it has no file. */
	__u64 socket_inode;
	/* EVENT_DELAYER_SIDE: from the last segment before the timer to the ACK it sent, by
	 * the socket's own clock (0: unknown); the least round trip and its variation. */
	__u64 timer_ns;
	__u32 min_rtt_us;
	__u32 rtt_var_us;
	/* EVENT_NAGLE_HOLD: the releasing segment's payload (0: a pure ACK, all that a
	 * delayed-ACK timer sends), and the data segments the socket had received and sent
	 * (tp->data_segs_in, data_segs_out: the connection's first exchanges). */
	__u32 ack_payload;
	__u32 data_segs_in;
	__u32 data_segs_out;
	__u32 pad2;
};

/* A socket whose delayed-ACK timer fired with an ACK pending after a small segment, while
 * it had nothing to send: waiting for the peer's next segment. */
struct ack_wait {
	__u64 fired_ns;
	/* tp->tcp_clock_cache when the timer fired: tcp_rcv_established refreshes it for
	 * every segment (tcp_mstamp_refresh, right after the tcp_probe tracepoint), so it is
	 * when the last segment arrived; tcp_delack_timer_handler refreshes it again just
	 * before tcp_send_ack. */
	__u64 clock_at_fire;
	__u32 snd_nxt;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct hold);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct ack_wait);
} ack_waits SEC(".maps");

/* Every Nagle hold is reported (user space counts them per process and socket), so the
 * buffer holds a 100 ms poll interval of about 80,000 holds a second. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} events SEC(".maps");

/* Entries in the holds and ack_waits maps, so that the hot paths skip the hash lookups
 * when there are none (evicted entries are not subtracted: that only costs a lookup). */
struct pending {
	__s64 holds;
	__s64 ack_waits;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pending);
} pending SEC(".maps");

/* Index 0: events lost because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline void fill_endpoints(struct watch_event *e, struct sock *sk)
{
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->remote_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (e->family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->local_addr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&e->remote_addr, sk, __sk_common.skc_v6_daddr);
	} else {
		__be32 local = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__be32 remote = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(e->local_addr, &local, 4);
		__builtin_memcpy(e->remote_addr, &remote, 4);
	}
}

static __always_inline struct pending *pending_counts(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&pending, &zero);
}

static __always_inline void forget_hold(__u64 *key)
{
	if (bpf_map_delete_elem(&holds, key) == 0) {
		struct pending *p = pending_counts();
		if (p)
			__sync_fetch_and_add(&p->holds, -1);
	}
}

static __always_inline void forget_ack_wait(__u64 *key)
{
	if (bpf_map_delete_elem(&ack_waits, key) == 0) {
		struct pending *p = pending_counts();
		if (p)
			__sync_fetch_and_add(&p->ack_waits, -1);
	}
}

static __always_inline struct watch_event *reserve_event(void)
{
	struct watch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *count = bpf_map_lookup_elem(&lost, &zero);
		if (count)
			__sync_fetch_and_add(count, 1);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	return e;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_send, struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	__u32 mss = tp->mss_cache;
	if ((__u32)ret >= mss)
		return 0; /* a bulk send: neither a request nor a reply, nothing for Nagle */
	/* Most small sends leave nothing held: that is all they cost. */
	__u32 write_seq = tp->write_seq;
	__u32 snd_nxt = tp->snd_nxt;
	__s32 held = (__s32)(write_seq - snd_nxt);
	/* Nagle holds only a segment smaller than the MSS (RFC 896) ... */
	if (held <= 0 || (__u32)held >= mss || tp->packets_out == 0)
		return 0;
	__u32 snd_una = tp->snd_una;
	__u32 snd_sml = tp->snd_sml;
	/* ... and Linux only while its last small segment is unacknowledged
	 * (tcp_minshall_check). */
	if ((__s32)(snd_sml - snd_una) <= 0 || (__s32)(snd_sml - snd_nxt) > 0)
		return 0;
	/* Past the peer's window it is flow control, not Nagle. */
	if ((__s32)(write_seq - (snd_una + tp->snd_wnd)) > 0)
		return 0;
	if (BPF_CORE_READ_BITFIELD(tp, nonagle) & (TCP_NAGLE_OFF | TCP_NAGLE_CORK))
		return 0;
	__u64 cgroup = 0;
	if (target_cgroup) {
		cgroup = bpf_get_current_cgroup_id();
		if (cgroup != target_cgroup)
			return 0;
	}

	struct hold hold = {
		.start_ns = bpf_ktime_get_ns(),
		.release_seq = snd_sml,
		.held_bytes = held,
		.pid = bpf_get_current_pid_tgid() >> 32,
		.mss = mss,
		.cgroup = cgroup,
	};
	bpf_get_current_comm(hold.comm, sizeof(hold.comm));
	/* The first held byte's wait is measured: a hold already there stays. */
	__u64 key = (__u64)sk;
	if (bpf_map_update_elem(&holds, &key, &hold, BPF_NOEXIST) == 0) {
		struct pending *p = pending_counts();
		if (p)
			__sync_fetch_and_add(&p->holds, 1);
	}
	return 0;
}

/* The segment's payload: skb->len less the TCP header (tcp_rcv_established: skb->data is
 * the TCP header). */
static __always_inline __u32 segment_payload(const struct sk_buff *skb, struct tcphdr *th)
{
	__u8 doff = 0;
	if (bpf_probe_read_kernel(&doff, 1, (unsigned char *)th + 12))
		return 0;
	__u32 len = BPF_CORE_READ(skb, len);
	__u32 header = (__u32)(doff >> 4) * 4;
	return len > header ? len - header : 0;
}

/* The held bytes leave when the ACK covers the last small segment. Every hold is
 * reported: user space counts them, and judges which were stalls. */
static __always_inline void end_hold(struct sock *sk, __u64 *key, __u32 ack,
				     const struct sk_buff *skb, struct tcphdr *th)
{
	struct hold *hold = bpf_map_lookup_elem(&holds, key);
	if (!hold)
		return;
	if ((__s32)(ack - hold->release_seq) < 0)
		return;
	__u64 now = bpf_ktime_get_ns();
	struct watch_event *e = reserve_event();
	if (e) {
		e->kind = EVENT_NAGLE_HOLD;
		e->pid = hold->pid;
		e->start_ns = hold->start_ns;
		e->end_ns = now;
		e->cgroup = hold->cgroup;
		e->held_bytes = hold->held_bytes;
		e->mss = hold->mss;
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (tp) {
			/* The round trips as the holder's kernel measured them (tcp_rtt_estimator):
			 * smoothed, RFC 6298's RTTVAR (mdev_us / 4), the windowed least. */
			e->srtt_us = tp->srtt_us >> 3;
			e->rtt_var_us = tp->mdev_us >> 2;
			e->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
			e->data_segs_in = tp->data_segs_in;
			e->data_segs_out = tp->data_segs_out;
		}
		e->ack_payload = segment_payload(skb, th);
		__builtin_memcpy(e->comm, hold->comm, sizeof(e->comm));
		fill_endpoints(e, sk);
		bpf_ringbuf_submit(e, now - hold->start_ns >= min_hold_ns ? 0 : BPF_RB_NO_WAKEUP);
	}
	forget_hold(key);
}

/* The peer's next data segment after this socket's delayed-ACK timer fired: reported
 * when it continues the stream, is smaller than a full segment (the MSS this socket
 * advertised, tp->advmss: what a Nagle sender holds is less) and this socket sent no
 * data since (the segment then answers the ACK alone). Pure ACKs are passed over. */
static __always_inline void answer_ack(struct sock *sk, const struct sk_buff *skb, __u64 *key,
				       struct tcphdr *th)
{
	struct ack_wait *wait = bpf_map_lookup_elem(&ack_waits, key);
	if (!wait)
		return;
	__u8 doff = 0;
	__be32 seq_be = 0;
	if (bpf_probe_read_kernel(&doff, 1, (unsigned char *)th + 12) ||
	    bpf_probe_read_kernel(&seq_be, sizeof(seq_be), &th->seq))
		return;
	__u32 len = BPF_CORE_READ(skb, len);
	__u32 header = (__u32)(doff >> 4) * 4;
	if (len <= header)
		return;
	__u32 payload = len - header;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return;
	__u32 full = tp->advmss;
	if (bpf_ntohl(seq_be) == tp->rcv_nxt && tp->snd_nxt == wait->snd_nxt && payload < full) {
		struct watch_event *e = reserve_event();
		if (e) {
			e->kind = EVENT_DELAYER_SIDE;
			e->start_ns = wait->fired_ns;
			e->end_ns = bpf_ktime_get_ns();
			e->held_bytes = payload;
			e->mss = full;
			e->srtt_us = tp->srtt_us >> 3;
			/* tcp_rtt_estimator: mdev_us is four times RFC 6298's RTTVAR; rtt_min is
			 * the windowed least round trip (tcp_min_rtt). */
			e->rtt_var_us = tp->mdev_us >> 2;
			e->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
			/* Still the clock of the handler's refresh before its ACK (this segment's
			 * own refresh comes after the tracepoint). */
			__u64 clock_now = tp->tcp_clock_cache;
			if (clock_now > wait->clock_at_fire)
				e->timer_ns = clock_now - wait->clock_at_fire;
			e->socket_inode = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
			fill_endpoints(e, sk);
			bpf_ringbuf_submit(e, 0);
		}
	}
	forget_ack_wait(key);
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_segment_in, struct sock *sk, const struct sk_buff *skb)
{
	struct pending *p = pending_counts();
	if (p && p->holds <= 0 && p->ack_waits <= 0)
		return 0;
	__u64 key = (__u64)sk;
	/* tcp_rcv_established: skb->data is the TCP header. */
	struct tcphdr *th = (struct tcphdr *)skb->data;
	if (!p || p->holds > 0) {
		__be32 ack_be = 0;
		if (bpf_probe_read_kernel(&ack_be, sizeof(ack_be), &th->ack_seq) == 0)
			end_hold(sk, &key, bpf_ntohl(ack_be), skb, th);
	}
	if (!p || p->ack_waits > 0)
		answer_ack(sk, skb, &key, th);
	return 0;
}

static __always_inline __u64 delack_timer_socket(struct timer_list *timer)
{
	if (!delack_timer_fn || (__u64)timer->function != delack_timer_fn)
		return 0;
	return (__u64)timer - bpf_core_field_offset(struct inet_connection_sock, icsk_delack_timer);
}

SEC("tp_btf/timer_expire_entry")
int BPF_PROG(on_timer_fire, struct timer_list *timer, unsigned long baseclk)
{
	__u64 key = delack_timer_socket(timer);
	if (!key)
		return 0;
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)key;
	__u8 ack_pending = BPF_CORE_READ(icsk, icsk_ack.pending);
	if (!(ack_pending & ICSK_ACK_TIMER))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct sock *sk = (struct sock *)key;
	struct watch_event *e = reserve_event();
	if (e) {
		e->kind = EVENT_DELACK_FIRED;
		e->end_ns = now;
		/* tcp_delack_timer (net/ipv4/tcp_timer.c): a socket a process holds defers the
		 * handler, and so its ACK, to release_sock (TCP_DELACK_TIMER_DEFERRED). */
		if (BPF_CORE_READ(sk, sk_lock.owned))
			e->flags = FIRED_DEFERRED;
		/* The timer as it ran: from the last segment's arrival (tcp_rcv_established
		 * refreshes tp->tcp_clock_cache, on the clock bpf_ktime_get_ns reads) to now. */
		__u64 last_in = BPF_CORE_READ((struct tcp_sock *)key, tcp_clock_cache);
		if (last_in && last_in < now)
			e->timer_ns = now - last_in;
		e->socket_inode = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
		fill_endpoints(e, sk);
		bpf_ringbuf_submit(e, 0);
	}
	/* The delayer's side: a small segment arrived (ICSK_ACK_PUSHED), and the socket
	 * had nothing to send (all it was given has left), so its ACK waited for the timer.
	 * tcp_delack_timer_handler sends it (tcp_send_ack) unless the socket is busy; a
	 * compressed SACK (tp->compressed_ack) takes another path. */
	if (!(ack_pending & ICSK_ACK_PUSHED))
		return 0;
	/* The socket comes from the timer's address, not as a trusted argument: its
	 * fields are read as kernel memory. */
	struct tcp_sock *tp = (struct tcp_sock *)key;
	__u32 snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	if (BPF_CORE_READ(tp, write_seq) != snd_nxt || BPF_CORE_READ(tp, compressed_ack))
		return 0;
	if (target_cgroup && BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id) != target_cgroup)
		return 0;
	struct ack_wait wait = {
		.fired_ns = now,
		.clock_at_fire = BPF_CORE_READ(tp, tcp_clock_cache),
		.snd_nxt = snd_nxt,
	};
	__u64 sk_key = key;
	int fresh = bpf_map_lookup_elem(&ack_waits, &sk_key) == 0;
	if (bpf_map_update_elem(&ack_waits, &sk_key, &wait, BPF_ANY) == 0 && fresh) {
		struct pending *p = pending_counts();
		if (p)
			__sync_fetch_and_add(&p->ack_waits, 1);
	}
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(on_destroy, struct sock *sk)
{
	struct pending *p = pending_counts();
	if (p && p->holds <= 0 && p->ack_waits <= 0)
		return 0;
	__u64 key = (__u64)sk;
	if (!p || p->holds > 0)
		forget_hold(&key);
	if (!p || p->ack_waits > 0)
		forget_ack_wait(&key);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
