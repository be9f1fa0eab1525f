//! Large messages in the atomic multicast (Derecho: RDMC carries the
//! data, the SST orders it): the glue between the multicast engine
//! ([`McastEngine`]) and the view's RDMC session ([`RdmcEngine`]) that
//! the driver and the embeddable group member share.
//!
//! A message longer than the multicast's slots goes on RDMC, and a
//! reference to it (its RDMC index and length) into the sender's ring.
//! The multicast engine counts a reference received only once the
//! session has the payload whole ([`McastEngine::set_large_received`]),
//! so the reference is delivered, in the total order, only once every
//! member has the payload, and [`take`] copies it out then. A session
//! lives for one view: it is wedged while the multicast engine is (a
//! view change is under way, so nothing more of the ending view's large
//! messages goes out and none lands in a slot the next view reuses),
//! delivers what the ending view's trim holds, and is replaced, among the
//! next view's members, once that view formed. A session that finds a
//! slot overwritten under a delivery (a faulty member) makes the
//! multicast engine suspect that member, so the view changes without it
//! instead of stalling.

use verbatim_core::config::Config;
use verbatim_core::engine::Engine;
use verbatim_core::fabric::{MemberId, MAX_MEMBERS};
use verbatim_core::mem::Memory;
use verbatim_core::multicast::{McastDelivery, McastEngine, SendError};
use verbatim_core::rdmc::{RdmcEngine, RdmcOrderError, RdmcSendError, RdmcWedge};

/// Keeps `rdmc` in step with the multicast engine's view (see the module
/// documentation) and tells the multicast engine what the session has.
/// Returns whether a session started.
pub fn follow_view<M: Memory + Clone>(
    m: &mut McastEngine<M>,
    rdmc: &mut Option<RdmcEngine<M>>,
    config: &Config,
    memory: &M,
    now_ns: u64,
) -> bool {
    if config.rdmc_slots == 0 {
        return false;
    }
    let st = m.status();
    let ending = st.wedged.is_some() || st.halted.is_some();
    let formed = st.started && !ending && !st.joining && !st.restarting;
    let epoch = m.epoch();
    if let Some(r) = rdmc.as_mut() {
        if ending && r.wedged().is_none() {
            r.wedge();
        }
        if let (false, Some(RdmcWedge::Corrupt(p))) = (ending, r.wedged()) {
            // A slot overwritten under a delivery (only a faulty member
            // does that): the session holds every later large message
            // back, so the member is suspected, as a death would be, and
            // the view changes without it. (A WRITE that failed is left
            // to the failure detectors: a cut that heals must not cost a
            // member its place.)
            if r.epoch() == epoch && p != config.self_id {
                tracing::warn!(
                    member = p.0,
                    "the large-message session failed on a member: suspecting it"
                );
                m.handle_peer_down(now_ns, p);
            }
        }
        if r.epoch() == epoch || !formed {
            r.handle_timeout(now_ns);
            let session = r.epoch();
            for id in 0..MAX_MEMBERS as u8 {
                let sender = MemberId(id);
                m.set_large_received(session, sender, r.received(sender));
            }
            return false;
        }
    } else if !formed {
        return false;
    }
    // A view RDMC cannot number (past `RDMC_EPOCH_MAX`) has no session:
    // its large messages wait (`NotStarted`).
    *rdmc = RdmcEngine::new(config, memory.clone(), epoch, m.view()).map(RdmcEngine::ordered);
    if rdmc.is_none() {
        tracing::warn!(
            epoch,
            "no large messages in this view: RDMC cannot run in it"
        );
    }
    rdmc.is_some()
}

/// Multicasts `payload`: in the ring when it fits a slot, else on RDMC
/// with its reference in the ring. A large message goes out only when
/// its reference can go with it (an RDMC message nobody references
/// would hold its sender's later ones back); a full RDMC slot set reads
/// as a full window.
pub fn send<M: Memory>(
    m: &mut McastEngine<M>,
    rdmc: &mut Option<RdmcEngine<M>>,
    config: &Config,
    payload: &[u8],
) -> Result<u64, SendError> {
    let len = payload.len() as u64;
    if len <= m.layout().payload_bytes_max {
        return m.send(payload);
    }
    if config.rdmc_slots == 0 || len > config.rdmc_message_bytes_max {
        return Err(SendError::TooLarge);
    }
    let Some(r) = rdmc.as_mut() else {
        // No session yet: the group has not formed (or RDMC cannot number
        // this view).
        return Err(SendError::NotStarted);
    };
    if r.epoch() != m.epoch() {
        // The view's session has not started yet.
        return Err(SendError::NotStarted);
    }
    m.ready_to_send()?;
    match r.send(payload) {
        Ok(index) => m.send_large_ref(index, payload.len() as u64),
        Err(RdmcSendError::SlotsBusy) => Err(SendError::WindowFull),
        Err(RdmcSendError::Wedged) => Err(SendError::Wedged),
        Err(RdmcSendError::TooLarge { .. }) => Err(SendError::TooLarge),
    }
}

/// The payload of a delivered large message's reference, copied into
/// `out` (at least `rdmc_message_bytes_max` bytes); its length. `None`
/// for a small message.
pub fn take<M: Memory>(
    rdmc: &mut Option<RdmcEngine<M>>,
    d: &McastDelivery,
    out: &mut [u8],
) -> Option<Result<usize, RdmcOrderError>> {
    let (index, len) = d.large?;
    let r = match rdmc.as_mut() {
        Some(r) if r.epoch() == d.epoch => r,
        _ => return Some(Err(RdmcOrderError::NotReceived)),
    };
    Some(match r.deliver_ordered(d.sender, index, out) {
        Ok(got) if got == len => Ok(got as usize),
        Ok(_) => Err(RdmcOrderError::Corrupt),
        Err(e) => Err(e),
    })
}
