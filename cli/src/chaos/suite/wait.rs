//! The waits at the end of a scenario, once its input is written: for the group to commit
//! all of it, and for the timers to send the last outputs (the timers workload) or close
//! the last days (financial close).

use std::time::{Duration, Instant};

use super::super::reader::verify_config;
use super::Run;
use crate::workloads::financial_close;
use kafka_eos_testkit::admin::ClientExt;

impl Run<'_, '_> {
    /// Financial close: waits until every merchant-day of the input has been emitted (the
    /// instances' idle timers close the days still open, with no heartbeat record), then
    /// 3 s more for anything a replay would add; `false` if some are still missing after
    /// 2 minutes. Waiting for the days themselves, not for a quiet revenue topic: after a
    /// late SIGKILL the victim's partitions sit unowned for the session timeout, then are
    /// restored, then idle for [`IDLE_CLOSE`](financial_close::IDLE_CLOSE), and no fixed
    /// quiet period covers that without also covering every other run's idle time.
    pub(super) fn wait_closed(&mut self) -> Result<bool, String> {
        let Some(topics) = self.close_topics.clone() else { return Ok(true) };
        let (started, deadline) = (Instant::now(), Instant::now() + Duration::from_secs(120));
        let vc = verify_config(self.ctx.client, &topics.payments, &topics.revenue, Duration::from_secs(60));
        loop {
            let rec = financial_close::reconcile(&vc, &topics).map_err(|e| format!("reconciliation: {e}"))?;
            if rec.unclosed == 0 && rec.merchant_days > 0 {
                self.note(format!(
                    "every merchant-day closed {:.1} s after the catch-up",
                    started.elapsed().as_secs_f64()
                ));
                self.pause(Duration::from_secs(3))?;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                self.note(format!(
                    "{} merchant-days were still not emitted 2 minutes after the catch-up",
                    rec.unclosed
                ));
                return Ok(false);
            }
            self.pause(Duration::from_secs(1))?;
        }
    }

    /// The timers workload: once the group has committed all the input, its last outputs
    /// are still pending timers. Waits until the concurrent reader has read an output per
    /// input record, then 3 s more for anything a replay would add; `false` if some are
    /// still missing after 2 minutes (they are then counted lost).
    pub(super) fn wait_timers_fired(&mut self, reader: &super::super::reader::Reader) -> Result<bool, String> {
        let (started, deadline) = (Instant::now(), Instant::now() + Duration::from_secs(120));
        let records = self.ctx.cfg.records;
        loop {
            let read = reader.read();
            if read >= records {
                self.note(format!("every timer fired {:.1} s after the catch-up", started.elapsed().as_secs_f64()));
                self.pause(Duration::from_secs(3))?;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                self.note(format!("{} outputs were still not read 2 minutes after the catch-up", records - read));
                return Ok(false);
            }
            self.pause(Duration::from_millis(500))?;
        }
    }

    /// Waits until the group has committed all the input; `false` on timeout.
    pub(super) fn wait_caught_up(&mut self) -> Result<bool, String> {
        let timeout = Duration::from_secs(300).max(Duration::from_millis(self.ctx.cfg.records / 2));
        let (started, deadline) = (Instant::now(), Instant::now() + timeout);
        let mut topics = vec![self.input_topic.clone()];
        if self.cell.workload == super::Workload::Velocity {
            topics.push(format!("{}-by-merchant-repartition", self.app));
        }
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.ctx.client.group_lag(&self.app, &topics) {
                Ok(0) => {
                    tracing::info!(elapsed = ?started.elapsed(), "group caught up");
                    return Ok(true);
                }
                Ok(lag) => last = format!("lag {lag}"),
                Err(e) => last = e.to_string(),
            }
            self.pause(Duration::from_millis(500))?;
        }
        self.note(format!("the group did not catch up within {timeout:?} ({last})"));
        Ok(false)
    }
}
