"""Assignment serving_queue: the reference passes its own checks, students draw their own servers and loads,
and the loads show what each grade cell is about (capacity needs every lighter load met, not only its own)."""


from tests import support

ASSIGNMENT = "serving_queue"
STUDENTS = ("ada", "grace")


def test_the_reference_passes_its_own_checks_and_students_draw_their_own_cases(reference):
    support.check_reference_and_draws(reference, ASSIGNMENT, STUDENTS)


def test_no_automatic_point_is_for_an_error_alone(reference):
    for grade_id in reference.checks:
        cases = [one for _, drawn in support.drawn(reference, ASSIGNMENT, grade_id, "ada") for one in drawn]
        assert any(not one.must_name for one in cases), grade_id


def p99s(reference, variables) -> list[float]:
    """The reference's p99 (ms) at each rate of a capacity case."""
    p99 = reference.namespace["p99_at_rate_ms"]
    return [p99(rate, variables["max_batch_size"], variables["max_wait_ms"], variables["overhead_ms"],
                variables["per_item_ms"], variables["n_requests"], variables["seed"])
            for rate in variables["rates_per_s"]]


def test_light_load_cases_are_missed_at_light_load_and_met_at_a_heavier_one(reference):
    capacity = reference.namespace["capacity_per_s"]
    for student in STUDENTS:
        [(_, cases)] = support.drawn(reference, ASSIGNMENT, "test_capacity_light_load", student)
        for one in cases:
            if "too long" in one.about:  # the highest rate that meets the SLO is not the capacity
                met = [p <= one.variables["slo_ms"] for p in p99s(reference, one.variables)]
                assert not met[0] and any(met), one.variables
                assert capacity(**one.variables) == 0


def test_capacity_cases_find_a_capacity_inside_the_grid(reference):
    capacity = reference.namespace["capacity_per_s"]
    found = [capacity(**one.variables) for student in STUDENTS
             for one in support.drawn(reference, ASSIGNMENT, "test_capacity", student)[1][1]
             if "another" in one.about]
    assert any(0 < c for c in found), found


def test_policies_that_tie_keep_the_first_listed(reference):
    best = reference.namespace["best_policy"]
    for student in STUDENTS:
        [(_, cases)] = support.drawn(reference, ASSIGNMENT, "test_no_policy", student)
        tied = next(one.variables for one in cases if "tie" in one.about)
        assert best(**tied)["max_batch_size"] == tied["policies"][0][0]
        swapped = {**tied, "policies": tied["policies"][::-1]}
        assert best(**swapped)["max_batch_size"] == tied["policies"][1][0]
