/*
 * The context switch for aarch64, AAPCS64.
 *
 *   void *weft__ctx_jump(void **save_sp, void *new_sp, void *arg)
 *                        x0              x1            x2
 *
 * The callee preserves x19-x28, the frame pointer x29, the link register
 * x30, sp, the low 64 bits of v8-v15 (d8-d15) and FPCR. The frame a
 * suspended context leaves on its stack (low addresses first), 176 bytes so
 * sp stays 16-byte aligned:
 *
 *        +------------+  <- saved sp
 *   +0   | d8  | d9   |
 *   +16  | d10 | d11  |
 *   +32  | d12 | d13  |
 *   +48  | d14 | d15  |
 *   +64  | x19 | x20  |
 *   +80  | x21 | x22  |
 *   +96  | x23 | x24  |
 *   +112 | x25 | x26  |
 *   +128 | x27 | x28  |
 *   +144 | x29 | x30  |   x30 is where `ret` goes
 *   +160 | FPCR| pad  |
 *        +------------+
 *
 * weft__ctx_make builds the same frame on a fresh stack with x19 = entry and
 * x30 = weft__ctx_trampoline. `arg` comes back in x0, which is also entry's
 * first argument for a fresh context.
 */
/* With the hot C code of the loop (WEFT__HOT in internal.h): every park
 * and wake-up runs through here. */
	.section .text.hot.weft_ctx,"ax",%progbits
	.globl weft__ctx_jump
	.hidden weft__ctx_jump
	.type weft__ctx_jump,%function
	.globl weft__ctx_jump_int
	.hidden weft__ctx_jump_int
	.type weft__ctx_jump_int,%function
	.p2align 4
weft__ctx_jump:
weft__ctx_jump_int:
	.cfi_startproc
	sub sp, sp, #176
	stp d8, d9, [sp, #0]
	stp d10, d11, [sp, #16]
	stp d12, d13, [sp, #32]
	stp d14, d15, [sp, #48]
	stp x19, x20, [sp, #64]
	stp x21, x22, [sp, #80]
	stp x23, x24, [sp, #96]
	stp x25, x26, [sp, #112]
	stp x27, x28, [sp, #128]
	stp x29, x30, [sp, #144]
	mrs x9, fpcr
	str x9, [sp, #160]
	mov x9, sp
	str x9, [x0]
	mov sp, x1
	ldp d8, d9, [sp, #0]
	ldp d10, d11, [sp, #16]
	ldp d12, d13, [sp, #32]
	ldp d14, d15, [sp, #48]
	ldp x19, x20, [sp, #64]
	ldp x21, x22, [sp, #80]
	ldp x23, x24, [sp, #96]
	ldp x25, x26, [sp, #112]
	ldp x27, x28, [sp, #128]
	ldp x29, x30, [sp, #144]
	ldr x9, [sp, #160]
	msr fpcr, x9
	add sp, sp, #176
	mov x0, x2
	ret
	.cfi_endproc
	.size weft__ctx_jump,.-weft__ctx_jump
	.size weft__ctx_jump_int,.-weft__ctx_jump_int

/* A fresh context's first `ret` lands here with x19 = entry, x0 = arg and
 * x29 = 0, which ends a debugger's backtrace. entry never returns. */
	.globl weft__ctx_trampoline
	.hidden weft__ctx_trampoline
	.type weft__ctx_trampoline,%function
	.p2align 4
weft__ctx_trampoline:
	.cfi_startproc
	.cfi_undefined x30
	blr x19
	brk #0
	.cfi_endproc
	.size weft__ctx_trampoline,.-weft__ctx_trampoline

	.section .note.GNU-stack,"",%progbits
