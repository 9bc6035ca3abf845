/* The honest witness: clsact ingress on the receiving peer interface. For every
 * BFD control packet (UDP 3784) it takes bpf_ktime_get_ns, finds the session
 * from My Discriminator (DISCR_BASE + slot) and records the interval since that
 * session's previous packet: per-slot count/sum/min/max and a per-group
 * histogram (10 us buckets). Packets go on to the stack (TC_ACT_OK). */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>

#define W_SLOTS 1024
#define W_GROUPS 3
#define W_NB 15000
#define W_BUCKET_NS 10000
#define DISCR_BASE 0x10000

struct wslot {
	__u64 last;
	__u64 cnt;
	__u64 sum;
	__u64 min;
	__u64 max;
};

BPF_ARRAY(w_slot, struct wslot, W_SLOTS);
BPF_ARRAY(w_group, __u32, W_SLOTS);
BPF_ARRAY(w_hist, __u64, W_GROUPS * W_NB);

int wit(struct __sk_buff *skb)
{
	__u8 b[50];
	__u32 k;

	if (bpf_skb_load_bytes(skb, 0, b, sizeof(b)) < 0)
		return TC_ACT_OK;
	if (b[12] != 0x08 || b[13] != 0x00 || b[23] != 17 || b[36] != 0x0e || b[37] != 0xc8)
		return TC_ACT_OK;
	__u64 now = bpf_ktime_get_ns();
	__u32 discr = ((__u32)b[46] << 24) | ((__u32)b[47] << 16) | ((__u32)b[48] << 8) | b[49];
	__u32 slot = discr - DISCR_BASE;
	struct wslot *w = w_slot.lookup(&slot);
	__u32 *grp = w_group.lookup(&slot);
	if (!w || !grp)
		return TC_ACT_OK;
	__u64 last = w->last;
	w->last = now;
	if (!last || now <= last)
		return TC_ACT_OK;
	__u64 d = now - last;
	w->cnt++;
	w->sum += d;
	if (!w->min || d < w->min)
		w->min = d;
	if (d > w->max)
		w->max = d;
	__u64 bkt = d / W_BUCKET_NS;
	if (bkt >= W_NB)
		bkt = W_NB - 1;
	__u32 g = *grp;
	if (g >= W_GROUPS)
		return TC_ACT_OK;
	k = g * W_NB + (__u32)bkt;
	__u64 *h = w_hist.lookup(&k);
	if (h)
		__sync_fetch_and_add(h, 1);
	return TC_ACT_OK;
}
