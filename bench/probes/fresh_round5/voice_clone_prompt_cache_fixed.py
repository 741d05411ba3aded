# expect: clean
# source: https://github.com/andimarafioti/faster-qwen3-tts/pull/37
# Voice cloning in ICL mode: the reference prompt is built once by the model's
# `create_voice_clone_prompt` and cached, then every generate call builds the
# talker inputs from the cached reference codes.
import torch
import torch.nn as nn

torch.manual_seed(0)
CODEBOOK, HIDDEN = 256, 32


class Talker(nn.Module):
    def __init__(self):
        super().__init__()
        self.codec_embedding = nn.Embedding(CODEBOOK, HIDDEN)
        self.text_embedding = nn.Embedding(1000, HIDDEN)
        self.rnn = nn.GRU(HIDDEN, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, CODEBOOK)

    def get_input_embeddings(self):
        return self.codec_embedding


class TTSModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.talker = Talker()
        self.speaker_encoder = nn.Sequential(nn.Linear(80, HIDDEN), nn.Tanh())

    @torch.inference_mode()
    def create_voice_clone_prompt(self, ref_mel, xvec_only=False):
        spk = self.speaker_encoder(ref_mel).mean(0)
        ref_code = (ref_mel[:, :8].abs() * 37).long() % CODEBOOK  # stand-in codec tokenizer
        return {"ref_spk_embedding": [spk], "ref_code": [None if xvec_only else ref_code], "icl_mode": not xvec_only}

    def generate_icl_prompt(self, text_ids, ref_code, spk):
        codec_emb = self.talker.get_input_embeddings()(ref_code)
        text_emb = self.talker.text_embedding(text_ids)
        return torch.cat([text_emb, codec_emb.flatten(0, 1).unsqueeze(0)[:, :32]], dim=1) + spk


class FasterTTS:
    def __init__(self, model):
        self.model = model
        self._voice_prompt_cache = {}

    def _prepare_generation(self, speaker, ref_mel, xvec_only):
        key = (speaker, xvec_only)
        if key not in self._voice_prompt_cache:
            self._voice_prompt_cache[key] = self.model.create_voice_clone_prompt(ref_mel, xvec_only=xvec_only)
        return self._voice_prompt_cache[key]

    def _build_talker_inputs_local(self, text_ids, voice_clone_prompt, index=0):
        m = self.model
        return m.generate_icl_prompt(
            text_ids,
            ref_code=voice_clone_prompt["ref_code"][index].to(text_ids.device).clone(),
            spk=voice_clone_prompt["ref_spk_embedding"][index].to(text_ids.device),
        )

    def generate_voice_clone(self, text_ids, speaker, ref_mel, xvec_only=False, max_new_tokens=12):
        prompt = self._prepare_generation(speaker, ref_mel, xvec_only)
        h = self._build_talker_inputs_local(text_ids, prompt)
        out, state = self.model.talker.rnn(h)
        tokens = []
        tok = self.model.talker.head(out[:, -1]).argmax(-1)
        for _ in range(max_new_tokens):
            tokens.append(tok)
            out, state = self.model.talker.rnn(self.model.talker.codec_embedding(tok).unsqueeze(1), state)
            tok = self.model.talker.head(out[:, -1]).argmax(-1)
        return torch.stack(tokens, 1)


tts = FasterTTS(TTSModel())
ref_mel = torch.randn(40, 80)
for sentence in ([5, 17, 42, 8], [9, 3, 77]):
    codes = tts.generate_voice_clone(torch.tensor([sentence]), "alice", ref_mel)
    print(codes.shape, codes[0, :6].tolist())
