//! The checks at the end of a scenario: the verifier, the final read and the concurrent
//! reader's log for the copy, the reconciliation for the financial close. The anomaly
//! classes of the `report` module are counted here.

use std::time::Duration;

use super::super::plan::Scenario;
use super::super::reader::{compare, describe_anomalies, last_offsets, read_final, verify_config, Reader};
use super::super::sink::end_offsets;
use super::Run;
use crate::workloads::financial_close;
use kafka_eos_testkit::verify::verify;

impl Run<'_, '_> {
    /// The financial close's check: every merchant-day's emitted total plus its late
    /// payments equals the batch recomputation from the raw payments, and no merchant-day
    /// is emitted twice. A mismatch counts as missing, a merchant-day emitted twice as a
    /// duplicate.
    pub(super) fn reconcile(self, caught_up: bool) -> Result<(), String> {
        let topics = self.close_topics.clone().ok_or("no financial-close topics")?;
        let vc = verify_config(self.ctx.client, &topics.payments, &topics.revenue, Duration::from_secs(300));
        let rec = financial_close::reconcile(&vc, &topics).map_err(|e| format!("reconciliation: {e}"))?;
        let t = self.fleet.totals();
        let r = &mut *self.result;
        r.records = rec.payments as u64 + rec.input_duplicates;
        r.anomalies.duplicate.at_end = rec.emitted_twice as u64;
        r.anomalies.lost.at_end = (rec.mismatches - rec.emitted_twice.min(rec.mismatches)) as u64;
        if rec.merchant_days == 0 {
            r.anomalies.lost.at_end += 1;
        }
        r.notes.push(format!(
            "{rec} ({} payments, {} redelivered copies, {} late payments)",
            rec.payments, rec.input_duplicates, rec.late_payments
        ));
        r.notes.extend(rec.examples.iter().cloned());
        r.notes.extend(fleet_notes(&self.fleet, &t));
        if !caught_up {
            return Err("the pipeline did not catch up (see notes); the counts above are as found".into());
        }
        Ok(())
    }

    /// The join's check (see the `join` module): lost pairs and dead letters, repeated
    /// ones, and outputs or dead letters that should not be there.
    pub(super) fn check_join(self, caught_up: bool) -> Result<(), String> {
        let vc = verify_config(self.ctx.client, &self.input_topic, &self.output_topic, Duration::from_secs(300));
        let found = super::super::join::check(&vc, &self.input_topic, &self.output_topic)?;
        let t = self.fleet.totals();
        let r = &mut *self.result;
        if r.scenario == Scenario::RandomAborts {
            r.faults = t.transactions_aborted;
        }
        r.records = found.records;
        (r.anomalies.lost.at_end, r.anomalies.duplicate.at_end, r.anomalies.other.at_end) =
            (found.lost, found.duplicate, found.other);
        r.notes.extend(found.notes);
        r.notes.extend(fleet_notes(&self.fleet, &t));
        if !caught_up {
            return Err("the pipeline did not catch up (see notes); the counts above are as found".into());
        }
        Ok(())
    }

    /// A sink scenario's check, from the sink's server: lost effects, duplicated ones (Redis
    /// with dedup), rows or offsets that should not be there (see the `sink` module).
    pub(super) fn check_sink(self, caught_up: bool) -> Result<(), String> {
        let server = self.sink.as_ref().ok_or("no sink server")?;
        let ends = end_offsets(self.ctx.client, &self.input_topic, self.ctx.cfg.partitions)?;
        let found = server.check(&self.app, &self.input_topic, &ends)?;
        let t = self.fleet.totals();
        let r = &mut *self.result;
        if r.scenario == Scenario::RandomAborts {
            r.faults = t.transactions_aborted;
        }
        r.records = found.records;
        r.anomalies.lost.at_end = found.lost;
        r.anomalies.duplicate.at_end = found.duplicate;
        r.anomalies.other.at_end = found.other;
        r.notes.extend(found.notes);
        r.notes.extend(fleet_notes(&self.fleet, &t));
        if !caught_up {
            return Err("the pipeline did not catch up (see notes); the counts above are as found".into());
        }
        Ok(())
    }

    pub(super) fn check(self, reader: Reader, caught_up: bool) -> Result<(), String> {
        let ctx = self.ctx;
        let cfg = ctx.cfg;
        let timeout = Duration::from_secs(300);
        let vc = verify_config(ctx.client, &self.input_topic, &self.output_topic, timeout);
        let report = verify(&vc).map_err(|e| format!("verifier: {e}"))?;
        let final_read = read_final(ctx.client, &self.output_topic, cfg.partitions, &self.input_topic, timeout)
            .map_err(|e| format!("final read: {e}"))?;
        let log = reader.finish(last_offsets(&final_read.records), Duration::from_secs(120))?;
        let cmp = compare(&log.seen, &final_read.records);
        let r = &mut *self.result;
        r.records = report.input_records;
        let a = &mut r.anomalies;
        (a.duplicate.reader, a.duplicate.at_end) = (log.duplicates, report.duplicates);
        a.lost.at_end = report.missing;
        a.aborted_read.reader = cmp.aborted_reads;
        (a.non_monotonic.reader, a.non_monotonic.at_end) =
            (log.backwards + log.order_violations, report.order_violations);
        a.skipped.reader = cmp.skipped;
        a.unseen.reader = cmp.unseen;
        (a.other.reader, a.other.at_end) = (log.unexpected, report.unexpected);

        let t = self.fleet.totals();
        if self.result.scenario == Scenario::RandomAborts {
            self.result.faults = t.transactions_aborted;
        }
        let cycles = (t.transactions_committed + t.transactions_aborted).max(1);
        let seen: usize = log.seen.iter().map(Vec::len).sum();
        let mut notes = vec![
            format!(
                "verifier: {} in, {} out, {} duplicates, {} missing, {} order violations, {} unexpected",
                report.input_records,
                report.output_records,
                report.duplicates,
                report.missing,
                report.order_violations,
                report.unexpected
            ),
            format!(
                "concurrent reader: {seen} read, {} duplicates, {} offsets going back, {} order violations, {} aborted reads, {} skipped offsets, {} unseen; {} offsets jumped over were markers or aborted records",
                log.duplicates, log.backwards, log.order_violations, cmp.aborted_reads, cmp.skipped, cmp.unseen, cmp.legitimate_gaps
            ),
            format!(
                "instances: {} started, {} crashed, {} graceful stops ended by SIGKILL; as last reported (a SIGKILLed instance's last half second is lost): {} transactions committed, {} aborted ({:.0}%), {} producers fenced, {} assignments",
                self.fleet.started,
                self.fleet.crashes.len(),
                self.fleet.slow_stops,
                t.transactions_committed,
                t.transactions_aborted,
                100.0 * t.transactions_aborted as f64 / cycles as f64,
                t.producers_fenced,
                t.rebalances
            ),
        ];
        notes.extend(self.fleet.crashes.iter().cloned());
        if report.duplicates > 0 || report.missing > 0 {
            let (n, p) = (cfg.records as i64, cfg.partitions as i64);
            let counts: Vec<i64> = (0..p).map(|i| n / p + i64::from(i < n % p)).collect();
            notes.extend(describe_anomalies(&final_read, &log, &counts, 10));
        }
        let mut fenced = 0;
        for (id, before) in &self.zombies {
            let after = self.fleet.status_of(*id).and_then(|s| s.summary).unwrap_or_default();
            if after.producers_fenced > before.producers_fenced || after.rebalances > before.rebalances {
                fenced += 1;
            } else {
                notes.push(format!("stalled instance {id} shows no sign of fencing: {before:?} -> {after:?}"));
            }
        }
        if !self.zombies.is_empty() {
            notes.push(format!(
                "stalled instances fenced on waking (lost their partitions or producer): {fenced} of {}",
                self.zombies.len()
            ));
        }
        self.result.anomalies.other.at_end += (self.zombies.len() - fenced) as u64;
        self.result.notes.extend(notes);
        if !caught_up {
            return Err("the pipeline did not catch up (see notes); the counts above are as found".into());
        }
        Ok(())
    }
}

/// What the instances did, as last reported, and how each crash ended: the notes of the
/// scenarios checked without the concurrent reader.
pub(super) fn fleet_notes(fleet: &super::super::fleet::Fleet, t: &kafka_eos::Summary) -> Vec<String> {
    let mut notes = vec![format!(
        "instances: {} started, {} crashed; as last reported: {} transactions committed, {} aborted, {} producers fenced, {} assignments, {} changelog records restored, {} partitions continued from standby copies",
        fleet.started,
        fleet.crashes.len(),
        t.transactions_committed,
        t.transactions_aborted,
        t.producers_fenced,
        t.rebalances,
        t.restored_records,
        t.standby_handovers
    )];
    notes.extend(fleet.crashes.iter().cloned());
    notes
}
