"""Tasks: labelled data split and normalized once, with the recipe of a healthy run."""
