use super::*;

const MS: Duration = Duration::from_millis(1);

fn busy_machine() -> Option<usize> {
    Some(1)
}

fn idle_machine() -> Option<usize> {
    Some(0)
}

/// Runs `steps` steps of `rows` rows through `c`, each taking `time(step, pool)`; the modes
/// the steps ran in.
fn run(
    c: &mut PoolChooser,
    steps: usize,
    rows: usize,
    time: impl Fn(usize, bool) -> Duration,
) -> Vec<bool> {
    (0..steps)
        .map(|i| {
            let pool = c.plan(rows);
            c.record(time(i, pool));
            pool
        })
        .collect()
}

/// Step times that depend on the mode only: `pool` on the pool, `alone` on the compute
/// thread alone.
fn steady(pool: Duration, alone: Duration) -> impl Fn(usize, bool) -> Duration + Copy {
    move |_, on_pool| if on_pool { pool } else { alone }
}

fn alone_steps(modes: &[bool]) -> usize {
    modes.iter().filter(|&&p| !p).count()
}

#[test]
fn a_quiet_machine_keeps_the_pool_and_backs_off_its_trials() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, idle_machine);
    let modes = run(&mut c, 1000, 1, steady(10 * MS, 16 * MS));
    assert!(c.using_pool());
    // Trials of 3 steps after 64, 128, 256, 256, 256 steps in the pool.
    assert_eq!(alone_steps(&modes), 3 * 5, "{modes:?}");
    assert!(modes[..64].iter().all(|&p| p));
    assert!(!modes[64] && !modes[66] && modes[67]);
    // The trials run further and further apart.
    let starts: Vec<usize> = (1..modes.len())
        .filter(|&i| !modes[i] && modes[i - 1])
        .collect();
    let gaps: Vec<usize> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [131, 259, 259, 259]);
}

#[test]
fn contention_moves_the_steps_off_the_pool_within_a_few_steps() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    // Quiet for 600 steps (the trials have backed off), then pool steps take 4 times as long.
    let modes = run(&mut c, 700, 1, |i, pool| match (pool, i < 600) {
        (true, true) => 10 * MS,
        (true, false) => 40 * MS,
        (false, _) => 16 * MS,
    });
    assert!(!c.using_pool());
    // The jump at step 600 refills the window (4 steps), then a 3-step trial wins, and
    // beats the 3 pool steps after it: alone from step 610.
    let first_alone = (600..700).find(|&i| !modes[i]).unwrap();
    assert_eq!(first_alone, 604, "{:?}", &modes[600..]);
    assert!(modes[607..610].iter().all(|&p| p), "{:?}", &modes[600..]);
    // Then only the scheduled trial of the pool 64 steps later.
    let pool_steps = modes[610..].iter().filter(|&&p| p).count();
    assert_eq!(pool_steps, 3, "{:?}", &modes[600..]);
}

#[test]
fn a_lone_thread_tries_the_pool_again_when_a_cpu_is_spare() {
    fn queue() -> Option<usize> {
        // The test's clock: runnable tasks read from the step count.
        STEP.with(|s| Some(if s.get() < 300 { 1 } else { 0 }))
    }
    thread_local!(static STEP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, queue);
    let modes: Vec<bool> = (0..400)
        .map(|i| {
            STEP.with(|s| s.set(i));
            let pool = c.plan(1);
            // A hog until step 300: the pool is slower than one thread; then quiet.
            let hog = i < 300;
            c.record(match (pool, hog) {
                (true, true) => 40 * MS,
                (true, false) => 10 * MS,
                (false, _) => 16 * MS,
            });
            pool
        })
        .collect();
    // Alone from the first trial (after 64 steps, confirmed by 3 pool steps) while the hog
    // runs, but for the scheduled trials of the pool (after 64 and 128 steps)...
    assert!(modes[..64].iter().all(|&p| p) && !modes[64]);
    assert!(modes[67..70].iter().all(|&p| p) && !modes[70]);
    assert_eq!(
        modes[70..300].iter().filter(|&&p| p).count(),
        3 * 2,
        "{modes:?}"
    );
    // ...and back on the pool soon after it ends: 2 spare reads (every 4th step), then a
    // winning trial, confirmed by 3 more steps alone.
    let back = (300..400).find(|&i| modes[i]).unwrap();
    assert!((302..=309).contains(&back), "{back}: {:?}", &modes[290..]);
    assert!(c.using_pool());
    assert!(
        modes[back + 3..back + 6].iter().all(|&p| !p),
        "{:?}",
        &modes[290..]
    );
    // Back on the pool, the next trial waits 256 steps (a new hog would show as a jump).
    assert!(modes[back + 6..].iter().all(|&p| p), "{:?}", &modes[290..]);
}

#[test]
fn a_lone_thread_under_a_lasting_hog_tries_the_pool_only_on_the_schedule() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    let modes = run(&mut c, 600, 2, steady(40 * MS, 16 * MS));
    assert!(!c.using_pool());
    // After the switch (step 70): trials of 3 pool steps, after 64, 128 and 256 steps.
    let pool_steps = modes[70..].iter().filter(|&&p| p).count();
    assert_eq!(pool_steps, 3 * 3, "{modes:?}");
}

/// Steps alternating between batches of 1 and 2 rows every 2 steps, the 2-row steps taking
/// twice as long; the pool's and the lone thread's times from `pool` and `alone`.
fn alternating(c: &mut PoolChooser, steps: usize, pool: Duration, alone: Duration) -> Vec<bool> {
    (0..steps)
        .map(|i| {
            let rows = 1 + (i / 2) % 2;
            let use_pool = c.plan(rows);
            let t = if use_pool { pool } else { alone };
            c.record(t * rows as u32);
            use_pool
        })
        .collect()
}

#[test]
fn each_batch_size_is_compared_with_its_own_steps() {
    // Equal modes: the 2-row steps are never taken for a jump, so the trials back off
    // as on a steady batch (64, 128, 256, 256, 256 steps).
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    let modes = alternating(&mut c, 1000, 10 * MS, 10 * MS);
    assert!(c.using_pool());
    assert_eq!(alone_steps(&modes), 3 * 5, "{modes:?}");
    // The lone thread 20% faster at both sizes: found though no 3 steps in a row match.
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    let modes = alternating(&mut c, 100, 10 * MS, 8 * MS);
    assert!(!c.using_pool());
    // Trial at step 64, confirmed at 67-69, alone from there on (the next trial of the pool
    // is due at 134).
    assert!(modes[..64].iter().all(|&p| p), "{modes:?}");
    assert!(modes[64..67].iter().all(|&p| !p), "{modes:?}");
    assert!(modes[67..70].iter().all(|&p| p), "{modes:?}");
    assert!(modes[70..].iter().all(|&p| !p), "{modes:?}");
}

#[test]
fn noise_within_the_margin_never_switches() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    // Alone is 5% faster: under the 10% margin.
    let modes = run(
        &mut c,
        2000,
        1,
        steady(Duration::from_micros(1000), Duration::from_micros(950)),
    );
    assert!(c.using_pool());
    // Only the scheduled trials: after 64, 128, then every 256 steps.
    assert_eq!(alone_steps(&modes), 3 * 8);
}

#[test]
fn prefill_chunks_one_thread_and_the_fixed_policies_are_not_steered() {
    let slow_pool = steady(40 * MS, 10 * MS);
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    assert!(run(&mut c, 500, MAX_ROWS + 1, slow_pool).iter().all(|&p| p));
    let mut c = PoolChooser::with_run_queue(PoolUse::Always, 2, 2, busy_machine);
    assert!(run(&mut c, 500, 1, slow_pool).iter().all(|&p| p));
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 1, 2, busy_machine);
    assert!(run(&mut c, 500, 1, slow_pool).iter().all(|&p| p));
    // `never` keeps decode steps off the pool, whatever they take, but not prefill chunks.
    let mut c = PoolChooser::with_run_queue(PoolUse::Never, 2, 2, idle_machine);
    let fast_pool = steady(MS, 10 * MS);
    assert!(run(&mut c, 500, MAX_ROWS, fast_pool).iter().all(|&p| !p));
    assert!(run(&mut c, 5, MAX_ROWS + 1, fast_pool).iter().all(|&p| p));
    // A record without a plan, or for a step that was not steered, changes nothing.
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    c.record(MS);
    assert!(c.plan(1));
}

#[test]
fn the_policy_parses_and_prints() {
    for p in [PoolUse::Adaptive, PoolUse::Always, PoolUse::Never] {
        assert_eq!(p.to_string().parse::<PoolUse>().unwrap(), p);
    }
    assert_eq!(" Always ".parse::<PoolUse>().unwrap(), PoolUse::Always);
    let err = "sometimes".parse::<PoolUse>().unwrap_err().to_string();
    assert!(err.contains("adaptive, always or never"), "{err}");
}

#[test]
fn the_run_queue_reads_on_linux() {
    if cfg!(target_os = "linux") {
        let n = others_runnable().expect("/proc/loadavg");
        assert!(n < 1 << 20);
    }
}

#[test]
fn a_spare_cpu_is_counted_against_the_cpus_the_process_may_use() {
    fn five_others() -> Option<usize> {
        Some(5)
    }
    let slow_pool = steady(40 * MS, 16 * MS);
    // 16 CPUs: five other runnable tasks leave room for both pool threads, so right after
    // going alone (trial at 64-66, confirmed at 67-69) two reads, 4 steps apart, start a
    // 3-step trial of the pool, which loses.
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 16, five_others);
    let modes = run(&mut c, 84, 1, slow_pool);
    let early = (70..84).find(|&i| modes[i]).expect("an early trial");
    assert!(early <= 79, "{early}: {modes:?}");
    assert!(modes[early..early + 3].iter().all(|&p| p) && !modes[early + 3]);
    // 2 CPUs: no room, no early trial.
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, five_others);
    let modes = run(&mut c, 84, 1, slow_pool);
    assert!(
        modes[..64].iter().all(|&p| p) && modes[70..].iter().all(|&p| !p),
        "{modes:?}"
    );
}

/// A trial of the pool whose first step waits for the pool's sleeping workers to wake (and
/// so takes longer than running alone) still wins when its other steps are clearly faster.
#[test]
fn a_slow_first_step_of_a_pool_trial_does_not_lose_it() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    // Contention first: the pool is slow, and the chooser goes alone.
    let modes = run(&mut c, 80, 4, steady(40 * MS, 10 * MS));
    assert!(!c.using_pool(), "{modes:?}");
    // Then the pool is twice as fast as alone, but the first step after a stretch alone
    // takes 2.5 times an alone step (a mean of the trial's ratios would lose: 1.17).
    let mut last_pool = false;
    let modes: Vec<bool> = (0..200)
        .map(|_| {
            let pool = c.plan(4);
            let t = match (pool, last_pool) {
                (true, false) => 25 * MS,
                (true, true) => 5 * MS,
                (false, _) => 10 * MS,
            };
            c.record(t);
            last_pool = pool;
            pool
        })
        .collect();
    assert!(c.using_pool(), "{modes:?}");
}

/// A burst of slow steps (the host busy for a few milliseconds) slows both modes: a trial
/// of the lone thread that runs as the burst ends beats the window taken during it, but not
/// the pool steps right after it, and the chooser stays on the pool.
#[test]
fn a_burst_that_slows_both_modes_does_not_switch() {
    let mut c = PoolChooser::with_run_queue(PoolUse::Adaptive, 2, 2, busy_machine);
    // The pool takes 5 ms and alone 8 ms, except in steps 300-306, where a burst makes the
    // pool take 12 ms (a jump) and alone 8.5 ms.
    let modes = run(&mut c, 400, 4, |i, pool| {
        match (pool, (300..307).contains(&i)) {
            (true, true) => 12 * MS,
            (true, false) => 5 * MS,
            (false, true) => Duration::from_micros(8_500),
            (false, false) => 8 * MS,
        }
    });
    // The jump at 300 starts the window again with burst steps (300-303); the trial
    // (304-306) beats them, but not the pool steps after it (307-309).
    assert!(modes[304..307].iter().all(|&p| !p), "{:?}", &modes[295..]);
    assert!(c.using_pool());
    // On the pool until the next scheduled trial, 64 steps on.
    assert!(
        modes[307..307 + 64].iter().all(|&p| p),
        "{:?}",
        &modes[295..]
    );
}
