# -*- coding: utf-8 -*-
"""The sample's prompts (its own are long clinical instructions; these keep their shape)."""
rollout_prompt_med = ("You are a doctor talking with a patient. Ask one question to learn what is missing, or "
                      "reply <stop /> when you know enough.")
rollout_prompt_med_Ra = "You are a doctor talking with a patient. Ask one question to learn what is missing."
reward_prompt_med = ("Grade the doctor's last question. The facts the patient has not told yet: {}. Answer with "
                     "<format_score>0 or 1</format_score><content_score>0 to 1</content_score>.")
