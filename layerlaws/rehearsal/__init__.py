"""A rehearsal of a config end to end on tiny stand-ins (He & Su, Yao & Xu and Aubry et
al. at paper scale, on a CPU in minutes): every hub model id and revision replaced by a
tiny random model of its family and every hub dataset by a few local rows with the same
splits and fields, in a throw-away Hugging Face cache read offline; the counts divided by
one factor; every job run, and what each used compared with what the planner asked for.
``python -m layerlaws.rehearsal --help``."""
