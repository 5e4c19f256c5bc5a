"""Running DPR: the pieces around the algorithm that take a recipe to a trained, saved and pushed model.

pipeline       the LfD stages as functions: SFT (+ π_ref) → DPR → evaluation against SFT
stages         the one stage flow of `trl-dpr dpr|spin|gsil`: sft_config → train → evaluation_config
cli            the `trl-dpr` command: checks a recipe before importing torch, launches the stage's script
recipe_checks  the checks of a recipe's keys and values that need no TRL (run before torch is imported)
recipe_parser  RecipeParser: TRL's TrlParser that rejects unknown keys; the shipped recipes by name
trainers       SafeSFTTrainer and DPRRunTrainer: TRL's SFTTrainer and DensePathTrainer with the services below
checkpointing  a run owns its output folder; checkpoints are complete or invisible
console_log    the trainers' console log prints numbers
hub            what a push uploads (no secrets, no staging folders), the model card, the push itself
gguf           a GGUF file as a base model, converted once into a Hugging Face folder
memory         the GPU memory plan of a recipe, from the model's config.json alone
"""
