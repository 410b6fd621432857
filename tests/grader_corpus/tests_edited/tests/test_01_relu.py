# A learner's edited copy: it must change nothing, the grader uses the instructor's tests.
import pytest


@pytest.mark.task('1.1')
@pytest.mark.points(2)
def test_relu_scalar():
    pass
