//! `crush_choose_firstn`: depth-first choice where a failed slot is simply
//! skipped, so later replicas move up (replicated pools).

use super::{Mapper, Request, Tries};

/// How one attempt at a slot ended.
enum Attempt {
    /// Found a usable item.
    Chosen(i32),
    /// Rejected or collided: retry per the tries budget.
    Retry { collide: bool, bucket_size: u32 },
    /// Bad item or type: give up on this slot.
    Skip,
}

impl Mapper<'_> {
    /// Chooses up to `request.numrep` distinct items of `request.type_id`
    /// below bucket `bucket_id` into `out[outpos..]`; returns the new outpos.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn choose_firstn(
        &mut self,
        bucket_id: i32,
        request: &Request,
        out: &mut [i32],
        mut outpos: usize,
        out_size: i32,
        tries: &Tries,
        mut out2: Option<&mut [i32]>,
        parent_r: i32,
    ) -> usize {
        let mut count = out_size;
        let mut rep: i32 = if tries.stable != 0 { 0 } else { outpos as i32 };
        while rep < request.numrep && count > 0 {
            if let Some(item) = self.firstn_slot(
                bucket_id, request, out, outpos, count, tries, &mut out2, rep, parent_r,
            ) {
                out[outpos] = item;
                outpos += 1;
                count -= 1;
            }
            rep += 1;
        }
        outpos
    }

    /// All descents for one replica slot `rep`; `None` if the slot is skipped.
    #[allow(clippy::too_many_arguments)]
    fn firstn_slot(
        &mut self,
        bucket_id: i32,
        request: &Request,
        out: &mut [i32],
        outpos: usize,
        count: i32,
        tries: &Tries,
        out2: &mut Option<&mut [i32]>,
        rep: i32,
        parent_r: i32,
    ) -> Option<i32> {
        let mut ftotal: u32 = 0;
        loop {
            // One descent from the top bucket.
            let mut in_id = bucket_id;
            let mut flocal: u32 = 0;
            loop {
                let r = rep.wrapping_add(parent_r).wrapping_add(ftotal as i32);
                let attempt = self.firstn_attempt(
                    &mut in_id, request, out, outpos, count, tries, out2, r, flocal,
                );
                let (collide, bucket_size) = match attempt {
                    Attempt::Chosen(item) => return Some(item),
                    Attempt::Skip => return None,
                    Attempt::Retry {
                        collide,
                        bucket_size,
                    } => (collide, bucket_size),
                };
                ftotal += 1;
                flocal += 1;
                if collide && flocal <= tries.local_retries {
                    continue; // retry locally a few times
                }
                if tries.local_fallback_retries > 0
                    && flocal <= bucket_size.wrapping_add(tries.local_fallback_retries)
                {
                    continue; // exhaustive bucket search
                }
                if ftotal < tries.tries {
                    break; // retry the descent
                }
                return None;
            }
        }
    }

    /// One draw in bucket `*in_id`, descending through intermediate buckets
    /// (which updates `*in_id`) until an item of the wanted type is found.
    #[allow(clippy::too_many_arguments)]
    fn firstn_attempt(
        &mut self,
        in_id: &mut i32,
        request: &Request,
        out: &mut [i32],
        outpos: usize,
        count: i32,
        tries: &Tries,
        out2: &mut Option<&mut [i32]>,
        r: i32,
        flocal: u32,
    ) -> Attempt {
        let map = self.map;
        loop {
            let bucket = self.bucket_at(*in_id);
            let size = bucket.items.len() as u32;
            if size == 0 {
                return Attempt::Retry {
                    collide: false,
                    bucket_size: size,
                };
            }
            let item = if tries.local_fallback_retries > 0
                && flocal >= (size >> 1)
                && flocal > tries.local_fallback_retries
            {
                self.perm_choose(bucket, request.x as u32, r)
            } else {
                self.bucket_choose(bucket, request.x, r, outpos)
            };
            if item >= map.max_devices {
                return Attempt::Skip;
            }
            let item_type = self.item_type(item);
            if item_type != request.type_id {
                if item >= 0 || map.bucket(item).is_none() {
                    return Attempt::Skip;
                }
                *in_id = item;
                continue;
            }
            if out[..outpos].contains(&item) {
                return Attempt::Retry {
                    collide: true,
                    bucket_size: size,
                };
            }
            if request.recurse_to_leaf {
                let Some(out2) = out2.as_deref_mut() else {
                    unreachable!("chooseleaf always passes a leaf vector");
                };
                if !self.firstn_leaf(item, request.x, out2, outpos, count, tries, r) {
                    return Attempt::Retry {
                        collide: false,
                        bucket_size: size,
                    };
                }
            }
            if item_type == 0 && self.is_out(item, request.x) {
                return Attempt::Retry {
                    collide: false,
                    bucket_size: size,
                };
            }
            return Attempt::Chosen(item);
        }
    }

    /// chooseleaf: finds a device below `item` for slot `outpos` of `out2`
    /// (or takes `item` itself if it is a device); false if none was found.
    #[allow(clippy::too_many_arguments)]
    fn firstn_leaf(
        &mut self,
        item: i32,
        x: i32,
        out2: &mut [i32],
        outpos: usize,
        count: i32,
        tries: &Tries,
        r: i32,
    ) -> bool {
        if item >= 0 {
            out2[outpos] = item;
            return true;
        }
        let sub_r = if tries.vary_r != 0 {
            r.wrapping_shr(tries.vary_r - 1)
        } else {
            0
        };
        // Stable mode starts every leaf search at rep 0.
        let numrep = if tries.stable != 0 {
            1
        } else {
            outpos as i32 + 1
        };
        let request = Request {
            x,
            numrep,
            type_id: 0,
            recurse_to_leaf: false,
        };
        let leaf_tries = Tries {
            tries: tries.recurse_tries,
            recurse_tries: 0,
            ..*tries
        };
        let got = self.choose_firstn(
            item,
            &request,
            out2,
            outpos,
            count,
            &leaf_tries,
            None,
            sub_r,
        );
        got > outpos
    }
}
