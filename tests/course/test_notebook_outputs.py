"""course.notebook_outputs: every committed notebook is without outputs; the check finds and clears them."""

import nbformat

from hwopt.course import notebook_outputs


def test_every_committed_notebook_is_without_outputs():
    notebooks = notebook_outputs.course_notebooks()
    assert len(notebooks) >= 10
    dirty = {path.name: notebook_outputs.cells_with_outputs(nbformat.read(path, as_version=4))
             for path in notebooks}
    assert not {k: v for k, v in dirty.items() if v}, "run: python -m hwopt.course.notebook_outputs"
    assert notebook_outputs.main(["--check"]) == 0


def test_the_check_finds_outputs_and_clearing_removes_them(tmp_path, capsys):
    path = tmp_path / "run.ipynb"
    ran = nbformat.v4.new_code_cell("print(1)", execution_count=1,
                                    outputs=[nbformat.v4.new_output("stream", text="1\n")])
    counted = nbformat.v4.new_code_cell("x = 1", execution_count=2)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"), ran, counted]), path)
    assert notebook_outputs.main(["--check", str(path)]) == 1
    assert "outputs in cells [1, 2]" in capsys.readouterr().out
    assert notebook_outputs.main([str(path)]) == 0
    assert notebook_outputs.main(["--check", str(path)]) == 0
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].source == "print(1)" and cells[1].outputs == [] and cells[2].execution_count is None
